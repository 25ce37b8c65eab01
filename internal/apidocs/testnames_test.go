package apidocs_test

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// notTests are code spans of the documents that look like a test's name and are not one.
var notTests = map[string]string{
	"TestResult": "the in-toto test-result statement's message (docs/validation.md)",
}

var (
	// codeSpan is a Markdown code span that is a test's name alone: `TestX` or
	// `TestConformance/its_name` (a * in the name matches any run of characters).
	codeSpan = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)(?:/([A-Za-z0-9_*]+))?`")
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9_]*)\(`)
	// conformanceName is a test of the store's conformance suite, as storetest lists them.
	conformanceName = regexp.MustCompile(`(?m)^\s*\{"([a-z0-9_]+)", test[A-Za-z0-9]+\},$`)
)

// TestDocumentsNameTestsThatExist ensures every test SECURITY.md and docs/ cite as the proof of
// a claim exists: a renamed or deleted test breaks the build, not the claim silently.
func TestDocumentsNameTestsThatExist(t *testing.T) {
	t.Parallel()
	tests, conformance := testNames(t)
	docs := []string{filepath.Join(repoRoot, "SECURITY.md"), filepath.Join(repoRoot, "README.md")}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			docs = append(docs, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range codeSpan.FindAllStringSubmatch(string(b), -1) {
			name, sub := m[1], m[2]
			if _, ok := notTests[name]; ok {
				continue
			}
			cited++
			if !tests[name] {
				t.Errorf("%s cites %s, which no test file defines", doc, name)
				continue
			}
			if name == "TestConformance" && sub != "" && !slices.ContainsFunc(conformance, func(c string) bool {
				ok, _ := path.Match(sub, c)
				return ok
			}) {
				t.Errorf("%s cites %s/%s, which names no conformance test", doc, name, sub)
			}
		}
	}
	if cited < 40 {
		t.Fatalf("the documents cite %d tests; SECURITY.md alone cites more: the pattern no longer finds them", cited)
	}
}

// testNames answers the names of every test function of the repository, and of the store's
// conformance tests.
func testNames(t *testing.T) (map[string]bool, []string) {
	t.Helper()
	tests := map[string]bool{}
	var conformance []string
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			tests[m[1]] = true
		}
		if strings.HasSuffix(filepath.ToSlash(p), "internal/store/storetest/storetest.go") {
			for _, m := range conformanceName.FindAllStringSubmatch(string(b), -1) {
				conformance = append(conformance, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(conformance) < 50 {
		t.Fatalf("found %d conformance tests in storetest.go: the pattern no longer finds them", len(conformance))
	}
	return tests, conformance
}

// TestEverySecurityRowNamesItsTest ensures each threat SECURITY.md's table lists names the test
// that fails without its defence: a Go test (checked to exist by TestDocumentsNameTestsThatExist)
// or a browser test of console/test. A row without one is a defence nobody would notice losing.
func TestEverySecurityRowNamesItsTest(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot, "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for i, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| threat |") || strings.HasPrefix(line, "| --- ") {
			continue
		}
		rows++
		if !codeSpan.MatchString(line) && !strings.Contains(line, ".test.mjs") {
			threat, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			t.Errorf("SECURITY.md:%d names no test of its defence: %s", i+1, threat)
		}
	}
	if rows < 50 {
		t.Errorf("SECURITY.md's table has %d rows: the test no longer finds them", rows)
	}
}
