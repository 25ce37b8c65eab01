// Package console serves the web console (console/, built into dist/ by `npm run build` there):
// the page at / and its script and style sheet under /console/. Everything the page shows comes
// from the AGWP API with the token the person enters, so serving it needs no authentication.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed dist
var dist embed.FS

// Files answers the built console, for tests that compare it with a fresh build.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded
	}
	return sub
}

// securityHeaders keep the page to its own script, style and API: the page holds a token, so no
// other origin may run code in it, frame it, or receive what it sends.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
		"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
	// A new build's page must not run with the old script: both are revalidated.
	"Cache-Control": "no-cache",
}

// Register mounts the console on mux: GET / (the page) and GET /console/ (its files).
func Register(mux *http.ServeMux) {
	files := Files()
	serve := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for k, v := range securityHeaders {
				w.Header().Set(k, v)
			}
			http.ServeFileFS(w, r, files, name)
		}
	}
	mux.Handle("GET /{$}", serve("index.html"))
	for _, name := range []string{"app.js", "app.css"} {
		mux.Handle("GET /console/"+name, serve(name))
	}
}
