package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problemBody is an RFC 9457 problem document.
type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// problem writes an application/problem+json error. detail must never hold
// a payload or a secret.
func problem(w http.ResponseWriter, status int, title, detail, requestID string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	b, _ := json.Marshal(problemBody{Type: "about:blank", Title: title, Status: status, Detail: detail, RequestID: requestID})
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
