package checkout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/ag-coord/ag/internal/repo"
)

// A repository may hold two names that differ only in case or in Unicode normalization
// (`README.md` and `Readme.md`, `café.txt` in NFC and NFD): git allows it, and so does an
// import. macOS and Windows file systems take such names for one, so a checkout there would
// write one file over the other and lose it without a word. A checkout refuses instead, naming
// both paths, when the tree holds such a pair and its file system folds names.

// foldedPairs answers the pairs of paths (or directories, "dir/") of paths that are one name
// where names are folded (repo.Fold), each "a" and "b" sorted, in path order.
func foldedPairs(paths []string) [][2]string {
	seen := map[string]string{} // fold → the first spelling met, of a path or a directory
	var pairs [][2]string
	add := func(name string) {
		f := repo.Fold(name)
		if other, ok := seen[f]; ok {
			if other != name {
				a, b := min(other, name), max(other, name)
				pairs = append(pairs, [2]string{a, b})
			}
			return
		}
		seen[f] = name
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	for _, p := range paths {
		for i := strings.IndexByte(p, '/'); i >= 0; i = nextSlash(p, i) {
			if d := p[:i+1]; !dirs[d] {
				dirs[d] = true
				add(d)
			}
		}
		add(p)
	}
	return pairs
}

func nextSlash(p string, i int) int {
	j := strings.IndexByte(p[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// foldsNames answers how the file system under root folds names ("case", "Unicode
// normalization"), "" when it keeps them apart, by writing a probe file and looking for it by
// another spelling. A variable, so that tests can stand in for a macOS file system, which a
// Linux test machine does not have.
var foldsNames = func(root *os.Root) (string, error) {
	// In the checkout's state directory when there is one: no scan looks there, so no scan
	// running meanwhile takes a probe for a file the user added.
	dir := ""
	if info, err := root.Lstat(StateDir); err == nil && info.IsDir() {
		dir = StateDir + "/"
	}
	for _, probe := range []struct{ what, write, look string }{
		{"case", "ag-fold-probe", "AG-FOLD-PROBE"},
		{"Unicode normalization", "ag-fold-probe-\u00e9", "ag-fold-probe-e\u0301"},
	} {
		f, err := root.OpenFile(dir+probe.write, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return "", fmt.Errorf("probe how the file system folds names: %w", err)
		}
		f.Close()
		_, err = root.Lstat(dir + probe.look)
		_ = root.Remove(dir + probe.write)
		switch {
		case err == nil:
			return probe.what, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("probe how the file system folds names: %w", err)
		}
	}
	return "", nil
}

// refuseFoldedNames answers an error naming every pair of paths of files that root's file
// system would take for one, nil when there is none or it keeps them apart. It probes the file
// system only for a tree that holds such a pair.
func refuseFoldedNames(root *os.Root, files map[string]treeFile) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	pairs := foldedPairs(paths)
	if len(pairs) == 0 {
		return nil
	}
	how, err := foldsNames(root)
	if err != nil || how == "" {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "this file system folds %s in names, and the tree holds %d pairs of names it would take for one, which a checkout here would write one over the other:", how, len(pairs))
	for _, p := range pairs {
		quote := strconv.Quote
		if !strings.EqualFold(p[0], p[1]) {
			// They differ in normalization, and would print alike: show the code points.
			quote = strconv.QuoteToASCII
		}
		fmt.Fprintf(&b, "\n  %s and %s", quote(p[0]), quote(p[1]))
	}
	b.WriteString("\ncheck out on a file system that keeps them apart (Linux's, or a case-sensitive APFS volume), or have one of each pair renamed")
	return errors.New(b.String())
}
