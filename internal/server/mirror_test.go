package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// forge is a git server on loopback as a team's forge is one: `git http-backend` behind Go's CGI
// handler, taking pushes from the user "bot" with the token "forge-secret", and able to go away.
type forge struct {
	t        *testing.T
	git      *gitRunner
	root     string
	srv      *httptest.Server
	down     atomic.Bool
	url      string
	seenAuth atomic.Value
}

func newForge(t *testing.T, git *gitRunner) *forge {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	f := &forge{t: t, git: git, root: t.TempDir()}
	git.must(f.root, nil, "init", "-q", "--bare", "-b", "main", "app.git")
	git.must(filepath.Join(f.root, "app.git"), nil, "config", "http.receivepack", "true")
	cgiHandler := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + f.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=bot"}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.down.Load() {
			http.Error(w, "the forge is down", http.StatusServiceUnavailable)
			return
		}
		if user, pass, ok := r.BasicAuth(); !ok || user != "bot" || pass != "forge-secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="forge"`)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		cgiHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	f.url = f.srv.URL + "/app.git"
	return f
}

// head answers the forge's main, "" while it has none.
func (f *forge) head() string {
	out, _, err := f.git.run(filepath.Join(f.root, "app.git"), nil, "rev-parse", "--verify", "-q", "refs/heads/main")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// waitMirror waits until the repository's mirror is in state want with the forge at commit
// (any commit when ""), and answers the mirror.
func waitMirror(t *testing.T, srv *agtest.Server, want agwpv1.MirrorState, commit string) *agwpv1.Mirror {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last *agwpv1.Mirror
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); <-tick.C {
		r, err := srv.Admin.Repos.GetRepository(context.Background(), &agwpv1.GetRepositoryRequest{Name: "app"})
		if err != nil {
			t.Fatal(err)
		}
		last = r.GetRepository().GetMirror()
		if last.GetState() == want && (commit == "" || last.GetPushedCommit() == commit) {
			return last
		}
	}
	t.Fatalf("the mirror is %v, want %v at %q", last, want, commit)
	return nil
}

// TestForgeMirrorKeepsTheForgeCurrent ensures a forge mirror gets the mainline at once and after
// every landing, with the commits and trailers a clone from ag shows, the credential never in an
// answer; that a forge branch that went its own way is not overwritten, is said to have
// diverged, and ag keeps landing; and that a forge that went away is caught up when it comes
// back.
func TestForgeMirrorKeepsTheForgeCurrent(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newPushFixture(t, backend, nil)
			fg := newForge(t, f.git)

			_, err := f.srv.Admin.Repos.SetMirror(ctx, &agwpv1.SetMirrorRequest{Repository: "app", Url: "http://bot:leak@" + strings.TrimPrefix(fg.url, "http://")})
			if err == nil || !strings.Contains(err.Error(), "credential apart") {
				t.Fatalf("SetMirror with a password in the URL = %v", err)
			}
			res, err := f.srv.Admin.Repos.SetMirror(ctx, &agwpv1.SetMirrorRequest{Repository: "app", Url: fg.url, Credential: "bot:forge-secret"})
			if err != nil {
				t.Fatal(err)
			}
			if m := res.GetRepository().GetMirror(); m.GetUrl() != fg.url || !m.GetHasCredential() || strings.Contains(res.String(), "forge-secret") {
				t.Fatalf("SetMirror answered %v", res)
			}
			_, main := f.mainline()
			waitMirror(t, f.srv, agwpv1.MirrorState_MIRROR_STATE_CURRENT, main)
			if fg.head() != main {
				t.Fatalf("the forge's main is %q, want ag's mainline %s", fg.head(), main)
			}

			// A landing reaches the forge, commits and trailers as a clone from ag has them.
			f.integrate("w2", map[string]string{"src/a.go": "package a // 2\n"})
			_, main = f.mainline()
			waitMirror(t, f.srv, agwpv1.MirrorState_MIRROR_STATE_CURRENT, main)
			fromAg := f.clone("from-ag")
			fromForge := filepath.Join(t.TempDir(), "from-forge")
			f.git.must("", nil, "clone", "-q", strings.Replace(fg.url, "http://", "http://bot:forge-secret@", 1), fromForge)
			logOf := func(dir string) string { return f.git.must(dir, nil, "log", "--format=%H %T%n%B") }
			if a, b := logOf(fromAg), logOf(fromForge); a != b || !strings.Contains(b, "Ag-Author: ada|w2") {
				t.Fatalf("the forge's history:\n%s\nag's:\n%s", b, a)
			}

			// The forge goes away: ag keeps landing, says the mirror fails, and catches up.
			fg.down.Store(true)
			f.integrate("w3", map[string]string{"src/a.go": "package a // 3\n"})
			m := waitMirror(t, f.srv, agwpv1.MirrorState_MIRROR_STATE_FAILING, "")
			if strings.Contains(m.GetLastError(), "forge-secret") {
				t.Fatalf("the mirror's error names the credential: %s", m.GetLastError())
			}
			fg.down.Store(false)
			f.integrate("w4", map[string]string{"src/a.go": "package a // 4\n"})
			_, main = f.mainline()
			waitMirror(t, f.srv, agwpv1.MirrorState_MIRROR_STATE_CURRENT, main)

			// Someone pushes to the forge's main directly: ag does not overwrite it.
			f.git.must(fromForge, nil, "pull", "-q")
			f.git.must(fromForge, nil, "commit", "-q", "--allow-empty", "-m", "Made on the forge")
			f.git.must(fromForge, nil, "push", "-q", "origin", "main")
			foreign := fg.head()
			f.integrate("w5", map[string]string{"src/a.go": "package a // 5\n"})
			m = waitMirror(t, f.srv, agwpv1.MirrorState_MIRROR_STATE_DIVERGED, "")
			if fg.head() != foreign || !strings.Contains(m.GetLastError(), foreign) {
				t.Fatalf("the forge's main is %s (want %s kept), the mirror says %q", fg.head(), foreign, m.GetLastError())
			}
			// The audit log says so once it is sealed (in the background), the metric at once.
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			deadline := time.Now().Add(30 * time.Second)
			for said := false; !said; <-tick.C {
				if time.Now().After(deadline) {
					t.Fatal("no repository.mirror_diverged event in the audit log")
				}
				events, err := f.srv.Admin.Audit.ListAuditEvents(ctx, &agwpv1.ListAuditEventsRequest{PageSize: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range events.GetEvents() {
					said = said || e.GetAction() == "repository.mirror_diverged" && e.GetSubject() == "repository/app"
					if strings.Contains(e.String(), "forge-secret") {
						t.Fatalf("an audit event names the credential: %v", e)
					}
				}
			}
			metrics, err := http.Get(f.srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(metrics.Body)
			metrics.Body.Close()
			if !strings.Contains(string(body), `ag_mirror_state{repository="app",state="diverged"} 1`) {
				t.Fatalf("the metrics do not say the mirror diverged:\n%s", body)
			}
		})
	}
}
