package handlers

import (
	"encoding/json"
	"net/http"
)

// scrapeTargets answers Prometheus's HTTP service discovery
// (http_sd_configs) with the ready replicas' metrics targets.
func (s *Server) scrapeTargets(w http.ResponseWriter, r *http.Request) {
	if s.Scrape == nil {
		http.Error(w, "service discovery is unavailable", http.StatusServiceUnavailable)
		return
	}
	groups, err := s.Scrape.Targets(r.Context())
	if err != nil {
		s.Log.Error("scrape targets", "err", err)
		http.Error(w, "listing scrape targets failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(groups)
}
