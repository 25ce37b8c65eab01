// Package layering holds a test of which parts of ag may import which: the client side (the
// SDK, the command line's client commands, the audit model an auditor verifies with) must not
// need the server's store or handlers, and the server must not need the client SDK.
package layering

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ag-coord/ag/"

// rules: in each directory, the files not listed as exceptions import none of the packages
// forbidden there.
var rules = []struct {
	dir        string
	forbidden  []string
	exceptions []string // files that may, and why
}{
	{dir: "internal/audit", forbidden: []string{"internal/store", "internal/server"}},
	// The store keeps data: the wire contract is the server's to speak.
	{dir: "internal/store", forbidden: []string{"agwp", "internal/server", "internal/gate", "client"}},
	// The backends carry out the queue's steps (store.QueueTx); the gate decides them.
	{dir: "internal/store/sqlite", forbidden: []string{"agwp", "internal/server", "internal/gate", "client"}},
	{dir: "internal/store/postgres", forbidden: []string{"agwp", "internal/server", "internal/gate", "client"}},
	// structjson encodes job payloads; the audit log is not its concern.
	{dir: "internal/structjson", forbidden: []string{"internal/audit", "internal/store"}},
	{dir: "internal/jsontext", forbidden: []string{"internal/"}},
	{dir: "internal/suggest", forbidden: []string{"internal/"}},
	{dir: "client", forbidden: []string{"internal/store", "internal/server", "internal/gate"}},
	{dir: "agwp", forbidden: []string{"internal/", "client"}},
	{dir: "internal/attest", forbidden: []string{"internal/store", "internal/server", "client"}},
	{dir: "internal/gate", forbidden: []string{"client"}},
	{dir: "internal/server", forbidden: []string{"client"}},
	{dir: "internal/gitstore", forbidden: []string{"internal/store", "internal/server"}},
	// The forge mirror pushes from the store's objects; the server wires it, the SDK is not its.
	{dir: "internal/mirror", forbidden: []string{"internal/server", "client", "internal/cli", "agwp"}},
	// What a push carries is read and diffed free of the database and the wire.
	{dir: "internal/gitpush", forbidden: []string{"internal/store", "internal/server", "client", "internal/cli"}},
	{dir: "internal/worker", forbidden: []string{"internal/store", "internal/server"}},
	{dir: "internal/cli", forbidden: []string{"internal/store", "internal/server"},
		exceptions: []string{"serve.go"}}, // ag serve runs the server over a store
	{dir: "internal/checkout", forbidden: []string{"internal/server", "internal/store", "internal/cli", "internal/mcp"}},
	// A git working tree is a workspace through git and the SDK, as a checkout is.
	{dir: "internal/gitwork", forbidden: []string{"internal/server", "internal/store", "internal/cli", "internal/mcp"}},
	// MCP acts through the checkout and the SDK, as the command line does, not through it.
	{dir: "internal/mcp", forbidden: []string{"internal/cli", "internal/server", "internal/store"}},
	// The engines of ag repo import and ag audit talk to the server through the SDK alone.
	{dir: "internal/importer", forbidden: []string{"internal/cli", "internal/server", "internal/store", "internal/mcp"}},
	{dir: "internal/auditclient", forbidden: []string{"internal/cli", "internal/server", "internal/store", "internal/mcp", "internal/checkout"}},
	// ag bench drives a running server from outside, as any client would.
	{dir: "internal/loadbench", forbidden: []string{"internal/cli", "internal/server", "internal/store", "internal/mcp"}},
	// Attestations verify offline with internal/attest; fetching one needs the SDK alone.
	{dir: "internal/attestclient", forbidden: []string{"internal/cli", "internal/server", "internal/store", "internal/mcp", "internal/checkout"}},
	// git's credential protocol and ag serve's settings are the standard library's alone.
	{dir: "internal/gitcredential", forbidden: []string{"internal/", "client", "gen/"}},
	{dir: "internal/serveconfig", forbidden: []string{"internal/", "client", "gen/"}},
	// ag task, ag message and ag inbox act through the SDK and the checkout, given the rest of
	// the command line's by an interface: never the command line itself, the server or the store.
	{dir: "internal/taskcli", forbidden: []string{"internal/cli", "internal/server", "internal/store", "internal/mcp"}},
	// A repository's policy and view are read and said through the SDK, apart from any checkout.
	{dir: "internal/repoview", forbidden: []string{"internal/cli", "internal/server", "internal/store", "internal/mcp"}},
}

func TestClientAndServerImportOnlyTheContract(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	for _, r := range rules {
		files, err := filepath.Glob(filepath.Join(root, r.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", r.dir, err)
		}
		for _, f := range files {
			name := filepath.Base(f)
			if strings.HasSuffix(name, "_test.go") || contains(r.exceptions, name) {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range r.forbidden {
					if p := strings.TrimPrefix(path, module); p != path && (p == bad || strings.HasPrefix(p, strings.TrimSuffix(bad, "/")+"/")) {
						t.Errorf("%s/%s imports %s, which %s must not need", r.dir, name, path, r.dir)
					}
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
