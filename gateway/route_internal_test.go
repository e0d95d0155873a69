package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzEndpointRouteOf holds the routing that bypasses the mux to the mux:
// a request it routes is one the mux routes to the same pattern with the
// same endpoint, without a redirect.
func FuzzEndpointRouteOf(f *testing.F) {
	for _, target := range []string{
		"/v1/endpoints/fraud-scoring/predict", "/v1/endpoints/chat_v2/chat/completions", "/v1/endpoints/a.b~c/completions",
		"/v1/endpoints//predict", "/v1/endpoints/./predict", "/v1/endpoints/../predict", "/v1/endpoints/a/../b/predict",
		"/v1/endpoints/a%2Fb/predict", "/v1/endpoints/a%20b/predict", "/v1/endpoints/a/predict/", "/v1/endpoints/a//predict",
		"/v1/endpoints/a/predict?x=1", "/v1/endpoints/a/chat/completions/", "/v1/endpoints/a/b/predict", "/v1/endpoints/a",
		"/v1//endpoints/a/predict", "/v1/endpoints/a/Predict", "/v1/chat/completions",
	} {
		for _, method := range []string{http.MethodPost, http.MethodGet, "post"} {
			f.Add(method, target)
		}
	}
	mux := http.NewServeMux()
	for _, er := range endpointRoutes {
		mux.HandleFunc(er.pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Pattern", r.Pattern)
			w.Header().Set("Endpoint", r.PathValue("endpoint"))
		})
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		r, err := http.NewRequest(method, "http://gw"+target, nil)
		if err != nil {
			return
		}
		er, name := endpointRouteOf(r)
		if er == nil {
			return
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Header().Get("Pattern") != er.pattern || w.Header().Get("Endpoint") != name {
			t.Fatalf("%s %q: routed to %q with endpoint %q; the mux answers %d, pattern %q, endpoint %q",
				method, target, er.pattern, name, w.Code, w.Header().Get("Pattern"), w.Header().Get("Endpoint"))
		}
	})
}

// TestEndpointRouteOfTakesTheCommonPaths checks that the bypass is taken
// for the paths callers send, and left for those the mux must see.
func TestEndpointRouteOfTakesTheCommonPaths(t *testing.T) {
	for target, want := range map[string]string{
		"/v1/endpoints/fraud-scoring/predict":           "fraud-scoring",
		"/v1/endpoints/chat-assistant/chat/completions": "chat-assistant",
		"/v1/endpoints/chat-assistant/completions":      "chat-assistant",
		"/v1/endpoints/./predict":                       "",
		"/v1/endpoints/a%2Fb/predict":                   "",
		"/v1/endpoints/a/b/predict":                     "",
	} {
		r := httptest.NewRequest(http.MethodPost, target, nil)
		er, name := endpointRouteOf(r)
		if name != want || (er != nil) != (want != "") {
			t.Errorf("%s: endpoint %q, want %q", target, name, want)
		}
	}
	if er, _ := endpointRouteOf(httptest.NewRequest(http.MethodGet, "/v1/endpoints/a/predict", nil)); er != nil {
		t.Error("a GET is routed past the mux, which answers it 405")
	}
}
