package testlint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// allowed are the sleeps tests keep, by "path:function" (the path from the repository's root,
// the function or "Type.Method" that calls it), each with why wall time has to pass there and no
// signal can stand in for it. A key that no sleep matches any more fails the lint too, so that
// the list stays as short as the sleeps it excuses.
var allowed = map[string]string{
	"internal/cli/bench_test.go:TestBenchTimesWorkersOutside": "ag bench reports wall time: its workers outside must " +
		"start measurably later than its \"ready\" for the test to see that the time reported leaves that wait out",
	"internal/e2e/gate_lanes_test.go:holds": "the gate of a real ag serve process advances a queue at once when a " +
		"change comes and on a sweep; an advance that builds nothing leaves no trace a test could wait for",
}

// TestTestsDoNotSleep ensures no test in the repository calls time.Sleep (or receives from
// time.After in a statement of its own, the same sleep spelled otherwise) outside a synctest
// bubble, where it moves the bubble's fake clock, unless the sleep is on the allow-list.
func TestTestsDoNotSleep(t *testing.T) {
	root := repoRoot(t)
	used := map[string]bool{}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found, err := sleeps(rel, src)
		if err != nil {
			return err
		}
		files++
		for _, s := range found {
			key := rel + ":" + s.function
			if _, ok := allowed[key]; ok {
				used[key] = true
				continue
			}
			t.Errorf("%s:%d: %s in %s decides the test by how long it waits: wait on a signal, a counter, the "+
				"fake clock or a synctest bubble, poll with a ticker, or put %q on the allow-list with why", rel, s.line, s.what, s.function, key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A walk that found nothing would pass whatever the tests do.
	if files < 100 {
		t.Fatalf("found %d test files under %s, want the repository's (more than 100)", files, root)
	}
	for key := range allowed {
		if !used[key] {
			t.Errorf("the allow-list names %s, which sleeps no more: remove it", key)
		}
	}
}

// TestTheLintFindsSleeps ensures the lint reports a sleep where it is, however time is imported
// and however the sleep is spelled, and nothing in a test that waits on a signal, polls with a
// ticker, or sleeps inside a synctest bubble.
func TestTheLintFindsSleeps(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string // "line function what"
	}{
		{"a sleep before a negative check", `package p

import (
	"testing"
	"time"
)

func TestQuiet(t *testing.T) {
	start()
	time.Sleep(50 * time.Millisecond)
	if calls() != 1 {
		t.Fatal("called again")
	}
}
`, []string{"10 TestQuiet time.Sleep"}},
		{"a sleep in a method's closure, time renamed", `package p

import tm "time"

type env struct{}

func (e *env) wait() {
	go func() {
		tm.Sleep(tm.Second)
	}()
}
`, []string{"9 env.wait time.Sleep"}},
		{"a receive from time.After as a statement", `package p

import "time"

func helper() {
	<-time.After(2 * time.Second)
}
`, []string{"6 helper <-time.After"}},
		{"time.Sleep passed as a value", `package p

import "time"

var pause = time.Sleep
`, []string{"5 (package level) time.Sleep"}},
		{"a signal, a ticker, a timeout and a bubble", `package p

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestWaits(t *testing.T) {
	done := make(chan struct{})
	go func() { close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not done")
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		<-tick.C
	}
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Minute)
		synctest.Wait()
	})
}
`, nil},
		{"a Sleep that is not time's", `package p

type clock struct{}

func (clock) Sleep(int) {}

func f(time clock) { time.Sleep(1) }
`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			found, err := sleeps("p_test.go", []byte(c.src))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range found {
				got = append(got, strconv.Itoa(s.line)+" "+s.function+" "+s.what)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("the lint reported %q, want %q", got, c.want)
			}
		})
	}
}

// sleep is a sleep the lint found: its line, the function it is in and how it is spelled.
type sleep struct {
	line     int
	function string
	what     string
}

// sleeps answers the sleeps in the Go source src of the file at path.
func sleeps(path string, src []byte) ([]sleep, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timePkg, synctestPkg := importedAs(f, "time"), importedAs(f, "testing/synctest")
	if timePkg == "" {
		return nil, nil
	}
	var out []sleep
	for _, decl := range f.Decls {
		function := "(package level)"
		if fd, ok := decl.(*ast.FuncDecl); ok {
			function = fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				function = receiverType(fd.Recv.List[0].Type) + "." + function
			}
		}
		// The stack of the nodes above the one visited: a sleep inside a function literal
		// given to synctest.Test moves the bubble's fake clock, not the wall's.
		var stack []ast.Node
		ast.Inspect(decl, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			defer func() { stack = append(stack, n) }()
			what := ""
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if isPkgSel(n, timePkg, "Sleep") {
					what = "time.Sleep"
				}
			case *ast.ExprStmt:
				// A select's case that receives from time.After is a timeout beside what the
				// select waits for; a statement alone is a sleep.
				if c, ok := stack[len(stack)-1].(*ast.CommClause); ok && c.Comm == n {
					break
				}
				if u, ok := n.X.(*ast.UnaryExpr); ok && u.Op == token.ARROW {
					if call, ok := u.X.(*ast.CallExpr); ok {
						if sel, ok := call.Fun.(*ast.SelectorExpr); ok && isPkgSel(sel, timePkg, "After") {
							what = "<-time.After"
						}
					}
				}
			}
			if what != "" && !inBubble(stack, synctestPkg) {
				out = append(out, sleep{line: fset.Position(n.Pos()).Line, function: function, what: what})
			}
			return true
		})
	}
	return out, nil
}

// importedAs answers the name f refers to the package path by, "" when it does not import it.
func importedAs(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// isPkgSel reports whether sel is pkg.name. A local variable that shadows the package is taken
// for it, which the files of this repository do not do to time.
func isPkgSel(sel *ast.SelectorExpr, pkg, name string) bool {
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// inBubble reports whether the innermost nodes of stack are inside a function literal passed
// to synctest.Test.
func inBubble(stack []ast.Node, synctestPkg string) bool {
	if synctestPkg == "" {
		return false
	}
	for i := len(stack) - 1; i > 0; i-- {
		lit, ok := stack[i].(*ast.FuncLit)
		if !ok {
			continue
		}
		call, ok := stack[i-1].(*ast.CallExpr)
		if !ok {
			continue
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && isPkgSel(sel, synctestPkg, "Test") && slices.Contains(call.Args, ast.Expr(lit)) {
			return true
		}
	}
	return false
}

// receiverType answers the name of a method's receiver type, without its pointer or type
// parameters.
func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// repoRoot answers the repository's root: the directory of go.mod above this file.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s, the repository's root as this file sees it: %v", root, err)
	}
	return root
}
