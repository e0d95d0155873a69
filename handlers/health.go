package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz reports whether PostgreSQL, NATS and ClickHouse answer; 503 names
// the ones that do not.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	status := map[string]string{}
	names := make([]string, 0, len(s.Ready))
	for name := range s.Ready {
		names = append(names, name)
	}
	sort.Strings(names)
	code := http.StatusOK
	for _, name := range names {
		if err := s.Ready[name].Ping(ctx); err != nil {
			status[name] = "unreachable"
			code = http.StatusServiceUnavailable
		} else {
			status[name] = "ok"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status)
}
