// Package static serves the portal's vendored assets (htmx 2.0.11, the
// stylesheet, live.js for pages that follow server-sent events) from the
// binary. No build step produces them.
package static

import (
	"embed"
	"net/http"
)

//go:embed htmx.min.js app.css live.js upload.js
var files embed.FS

// Handler serves the assets, cacheable for a day.
func Handler() http.Handler {
	fs := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		fs.ServeHTTP(w, r)
	})
}
