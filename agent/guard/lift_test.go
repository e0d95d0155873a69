package guard

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBodyReadsEOFAfterTheAnswerStarts replays, in order, what the
// forwarding transport and the HTTP/1 server do to a request body when the
// runtime answers before the transport's last read past Content-Length:
// the body is read to its end, the answer's header is written (the server
// closes the body then), and the body is read once more. That read must be
// io.EOF: an error there made the transport drop its connection to the
// runtime and cut the answer in flight (how TestGuardCutsHeldConnections
// once failed in CI: its stream lost its second line).
func TestBodyReadsEOFAfterTheAnswerStarts(t *testing.T) {
	t.Parallel()
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := &liftAtEOF{ReadCloser: r.Body, rc: http.NewResponseController(w)}
		if b, err := io.ReadAll(body); err != nil || string(b) != `{"stream":true}` {
			got <- errors.Join(errors.New("the body before the answer: "+string(b)), err)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		n, err := body.Read(make([]byte, 512))
		if n != 0 || !errors.Is(err, io.EOF) {
			got <- errors.Join(errors.New("the read after the answer started did not end at io.EOF"), err)
			return
		}
		got <- body.Close()
	}))
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
