package gitstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/ag-coord/ag/internal/repo"
)

// model is a repository as a flat map, which UpdateTree must agree with.
type model map[string]plumbing.Hash

func (m model) files() []File {
	out := make([]File, 0, len(m))
	for p, h := range m {
		out = append(out, File{Path: p, Blob: h})
	}
	return out
}

// collides reports whether some path of m is also a directory of another.
func (m model) collides() bool {
	for p := range m {
		for i := range len(p) {
			if p[i] == '/' {
				if _, ok := m[p[:i]]; ok {
					return true
				}
			}
		}
	}
	return false
}

var segments = []string{"a", "b", "a.b", "a-b", "a0", "src", "x"}

func randomPath(r *rand.Rand) string {
	n := 1 + r.IntN(4)
	segs := make([]string, n)
	for i := range segs {
		segs[i] = segments[r.IntN(len(segments))]
	}
	return strings.Join(segs, "/")
}

// TestUpdateTreeMatchesRebuild ensures that updating a tree along the edited paths gives the
// root id that building the whole tree from scratch gives, over random edits: writes, deletes,
// whole directories deleted, files that become directories and back, and edits that would
// make a path both a file and a directory (refused). It writes only trees on the edited
// spines: never more trees than the edited paths have directories.
func TestUpdateTreeMatchesRebuild(t *testing.T) {
	t.Parallel()
	t.Run("decoding every tree", func(t *testing.T) {
		t.Parallel()
		s := newStorer()
		updateTreeMatchesRebuild(t, s, s)
	})
	t.Run("splicing packed trees", func(t *testing.T) {
		t.Parallel()
		s := newStorer()
		updateTreeMatchesRebuild(t, packingStorer{s, t}, s)
	})
}

func updateTreeMatchesRebuild(t *testing.T, s storer.EncodedObjectStorer, writes *countingStorer) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	blob := func() plumbing.Hash {
		id, err := WriteBlob(s, fmt.Appendf(nil, "content %d\n", r.IntN(50)))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	m := model{}
	// Up to 300 files: a few early top-level files can leave fewer paths that do not collide.
	for try := 0; len(m) < 300 && try < 20000; try++ {
		p := randomPath(r)
		m[p] = blob()
		if m.collides() {
			delete(m, p)
		}
	}
	root, err := WriteTree(s, m.files())
	if err != nil {
		t.Fatal(err)
	}
	var counts [6]int
	for step := range 200 {
		paths := make([]string, 0, len(m))
		for p := range m {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		var edits []Edit
		edited := map[string]bool{}
		add := func(e Edit) {
			if !edited[e.Path] {
				edited[e.Path] = true
				edits = append(edits, e)
			}
		}
		kind := r.IntN(6)
		switch {
		case kind == 0 && len(paths) > 0: // change a file
			add(Edit{Path: paths[r.IntN(len(paths))], Blob: blob()})
		case kind == 1 && len(paths) > 0: // delete a file or two
			for range 1 + r.IntN(2) {
				add(Edit{Path: paths[r.IntN(len(paths))], Delete: true})
			}
		case kind == 2 && len(paths) > 0: // a file becomes a directory
			p := paths[r.IntN(len(paths))]
			add(Edit{Path: p, Delete: true})
			add(Edit{Path: p + "/" + segments[r.IntN(len(segments))], Blob: blob()})
		case kind == 3 && len(paths) > 0: // a directory's files all go, maybe a file takes its name
			d := path.Dir(paths[r.IntN(len(paths))])
			if !strings.Contains(d, "/") && r.IntN(4) > 0 || d == "." { // keep most top directories; "." is the root
				d = paths[r.IntN(len(paths))]
			}
			for _, q := range paths {
				if strings.HasPrefix(q, d+"/") {
					add(Edit{Path: q, Delete: true})
				}
			}
			if r.IntN(2) == 0 {
				add(Edit{Path: d, Blob: blob()})
			}
		default: // a few new files; one batch in eight may collide
			mayCollide := r.IntN(8) == 0
			for range 1 + r.IntN(3) {
				p := randomPath(r)
				for try := 0; try < 50 && !mayCollide; try++ {
					if _, ok := m[p]; ok {
						break
					}
					m[p] = plumbing.ZeroHash
					ok := !m.collides()
					delete(m, p)
					if ok {
						break
					}
					p = randomPath(r)
				}
				add(Edit{Path: p, Blob: blob()})
			}
			kind = 4
		}
		next := model{}
		for p, h := range m {
			next[p] = h
		}
		for _, e := range edits {
			if e.Delete {
				delete(next, e.Path)
			} else {
				next[e.Path] = e.Blob
			}
		}
		before := writes.Writes()
		got, err := UpdateTree(s, root, edits)
		if next.collides() {
			var ce *repo.CollisionError
			if !errors.As(err, &ce) {
				t.Fatalf("step %d: edits %v make a collision; UpdateTree answered %s, %v", step, edits, got, err)
			}
			counts[5]++
			continue
		}
		if err != nil {
			t.Fatalf("step %d: edits %v: %v", step, edits, err)
		}
		written := writes.Writes() - before
		spine := map[string]bool{"": true}
		for _, e := range edits {
			for _, d := range repo.Ancestors(e.Path) {
				spine[d] = true
			}
		}
		if written > len(spine) {
			t.Errorf("step %d: %d trees written for edits whose spines hold %d directories", step, written, len(spine))
		}
		want, err := WriteTree(newStorer(), next.files())
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d: edits %v: root %s, rebuilt %s", step, edits, got, want)
		}
		counts[kind]++
		m, root = next, got
	}
	t.Logf("applied: %d changes, %d deletes, %d file→dir, %d directories emptied (or →file), %d batches of new files; %d collisions refused; %d files at the end", counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], len(m))

	// Everything deleted: the empty tree.
	var all []Edit
	for p := range m {
		all = append(all, Edit{Path: p, Delete: true})
	}
	if got, err := UpdateTree(s, root, all); err != nil || got != EmptyTree {
		t.Errorf("all deleted: %s, %v; want the empty tree", got, err)
	}
}

// TestUpdateTreeRefuses ensures a path edited twice, an unclean path and a write without a
// blob are refused, and that deleting what is not there changes nothing.
func TestUpdateTreeRefuses(t *testing.T) {
	t.Parallel()
	s := newStorer()
	b, _ := WriteBlob(s, []byte("x"))
	root, err := WriteTree(s, []File{{Path: "a/b", Blob: b}})
	if err != nil {
		t.Fatal(err)
	}
	for _, edits := range [][]Edit{
		{{Path: "a/c", Blob: b}, {Path: "a/c", Delete: true}},
		{{Path: "a//c", Blob: b}},
		{{Path: ".git/config", Blob: b}},
		{{Path: "a/c"}},
	} {
		if _, err := UpdateTree(s, root, edits); err == nil {
			t.Errorf("edits %v accepted", edits)
		}
	}
	before := s.Writes()
	if got, err := UpdateTree(s, root, []Edit{{Path: "nope", Delete: true}, {Path: "a", Delete: true}, {Path: "a/b/c", Delete: true}}); err != nil || got != root {
		t.Errorf("deleting what is not there: %s, %v; want %s", got, err, root)
	}
	if s.Writes() != before {
		t.Errorf("deleting what is not there wrote %d objects", s.Writes()-before)
	}
}

// BenchmarkUpdateTreeOneFile changes one file of a 100,000-file tree (100 directories of 10
// directories of 100 files) and reports the objects written per change.
func BenchmarkUpdateTreeOneFile(b *testing.B) {
	s := newStorer()
	blob, _ := WriteBlob(s, []byte("package x\n"))
	files := make([]File, 0, 100_000)
	for i := range 100 {
		for j := range 10 {
			for k := range 100 {
				files = append(files, File{Path: fmt.Sprintf("pkg%02d/sub%d/file%03d.go", i, j, k), Blob: blob})
			}
		}
	}
	start := time.Now()
	root, err := WriteTree(s, files)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("built 100,000 files in %d trees in %v", s.Writes()-1, time.Since(start))
	b.ResetTimer()
	before := s.Writes()
	n := 0
	for ; b.Loop(); n++ {
		id := BlobID(fmt.Appendf(nil, "change %d\n", n)) // the blob itself is stored by the caller
		if root, err = UpdateTree(s, root, []Edit{{Path: "pkg42/sub7/file099.go", Blob: id}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.Writes()-before)/float64(n), "objects/op")
}

// TestSplicedTreesAreTheOnesDecodingWrites ensures that editing files in place in a tree's
// encoding gives the tree decoding and encoding it gives, for files of every mode git writes
// (an edited file is written 100644 either way) and for an edit that is not a replacement.
func TestSplicedTreesAreTheOnesDecodingWrites(t *testing.T) {
	t.Parallel()
	base := newStorer()
	blob := func(s string) plumbing.Hash {
		id, err := WriteBlob(base, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	exe, link, sub := blob("#!/bin/sh\n"), blob("target"), blob("sub")
	root, err := writeTreeObject(base, []object.TreeEntry{
		{Name: "run.sh", Mode: filemode.Executable, Hash: exe},
		{Name: "link", Mode: filemode.Symlink, Hash: link},
	})
	if err != nil {
		t.Fatal(err)
	}
	withDir, err := UpdateTree(base, root, []Edit{{Path: "d/x", Blob: sub}})
	if err != nil {
		t.Fatal(err)
	}
	for _, edits := range [][]Edit{
		{{Path: "run.sh", Blob: blob("#!/bin/sh\necho\n")}},
		{{Path: "link", Blob: blob("a file now")}},
		{{Path: "d/x", Blob: blob("sub, edited")}},
		{{Path: "run.sh", Blob: exe}}, // the same content: only the mode changes
		{{Path: "d/x", Blob: blob("again")}, {Path: "new", Blob: sub}},
	} {
		decoded, err := UpdateTree(base, withDir, edits)
		if err != nil {
			t.Fatal(err)
		}
		spliced, err := UpdateTree(packingStorer{base, t}, withDir, edits)
		if err != nil {
			t.Fatal(err)
		}
		if spliced != decoded {
			t.Errorf("edits %v: spliced %s, decoded %s", edits, spliced, decoded)
		}
	}
}

// TestAFileBecomingADirectoryKeepsItsNeighbours ensures that a file turned into a directory,
// which moves it in git's order, does not hide the names around it from the edits after it:
// "a" and "a-b" sort apart as files and "a/" after "a-b".
func TestAFileBecomingADirectoryKeepsItsNeighbours(t *testing.T) {
	t.Parallel()
	s := newStorer()
	blob := func(c string) plumbing.Hash {
		id, err := WriteBlob(s, []byte(c))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	root, err := WriteTree(s, []File{{Path: "a", Blob: blob("a")}, {Path: "a-b", Blob: blob("a-b")}})
	if err != nil {
		t.Fatal(err)
	}
	edits := []Edit{{Path: "a", Delete: true}, {Path: "a/x", Blob: blob("x")}, {Path: "a-b", Blob: blob("a-b, edited")}}
	for i := range 20 { // the edits' names are visited in a map's order
		got, err := UpdateTree(s, root, edits)
		if err != nil {
			t.Fatal(err)
		}
		want, err := WriteTree(newStorer(), []File{{Path: "a/x", Blob: blob("x")}, {Path: "a-b", Blob: blob("a-b, edited")}})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			entries, _ := TreeEntries(s, got)
			t.Fatalf("try %d: root %s holds %v, want %s", i, got, entries, want)
		}
	}
}
