package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ag-coord/ag/internal/console"
)

// TestServesThePageWithItsFilesOnly ensures that / answers the console's page, /console/ its
// script and style sheet, each with the headers that keep other origins out of a page holding
// a token, and that nothing else of the embedded files, nor other paths, is served.
func TestServesThePageWithItsFilesOnly(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	console.Register(mux)
	mux.HandleFunc("POST /agwp.v1.AdminService/WhoAmI", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("api")) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	for path, want := range map[string]string{"/": "text/html", "/console/app.js": "javascript", "/console/app.css": "text/css"} {
		res, body := get("GET", path)
		if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Type"), want) || len(body) == 0 {
			t.Fatalf("GET %s: %d %q, %d bytes; want 200 %s", path, res.StatusCode, res.Header.Get("Content-Type"), len(body), want)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, d) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", path, csp, d)
			}
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, res.Header)
		}
	}
	if _, body := get("GET", "/"); !strings.Contains(body, `src="/console/app.js"`) || !strings.Contains(body, `href="/console/app.css"`) {
		t.Errorf("the page does not load its script and style sheet:\n%s", body)
	}
	for _, path := range []string{"/console/", "/console/index.html", "/index.html", "/app.js", "/console/../go.mod", "/anything"} {
		if res, _ := get("GET", path); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, res.StatusCode)
		}
	}
	if res, body := get("POST", "/agwp.v1.AdminService/WhoAmI"); body != "api" {
		t.Errorf("the API behind the console answered %d %q", res.StatusCode, body)
	}
}
