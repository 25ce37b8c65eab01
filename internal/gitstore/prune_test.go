package gitstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/repo"
)

// TestPruneMatchesRebuild ensures that pruning paths from a tree gives the root id that building
// the tree of the files left from scratch gives, over random trees and random directory and file
// paths, some of which the tree does not hold.
func TestPruneMatchesRebuild(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	s := newStorer()
	for round := range 100 {
		m := model{}
		for try := 0; len(m) < 60 && try < 2000; try++ {
			p := randomPath(r)
			id, err := WriteBlob(s, fmt.Appendf(nil, "%s %d\n", p, r.IntN(3)))
			if err != nil {
				t.Fatal(err)
			}
			m[p] = id
			if m.collides() {
				delete(m, p)
			}
		}
		root, err := WriteTree(s, m.files())
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for range 1 + r.IntN(4) {
			p := randomPath(r)
			if r.IntN(2) == 0 {
				p += "/"
			}
			paths = append(paths, p)
		}
		left := model{}
		for p, id := range m {
			dropped := false
			for _, q := range paths {
				dropped = dropped || repo.Covers(q, p)
			}
			if !dropped {
				left[p] = id
			}
		}
		want, err := WriteTree(s, left.files())
		if err != nil {
			t.Fatal(err)
		}
		got, err := Prune(s, root, paths)
		if err != nil {
			t.Fatalf("round %d: Prune %v: %v", round, paths, err)
		}
		if got != want {
			t.Fatalf("round %d: Prune %v = %s, want %s (the tree of the %d files left of %d)", round, paths, got, want, len(left), len(m))
		}
	}
}

// TestPruneKeepsWhatItDoesNotName ensures that a pruned tree shares the subtrees off the pruned
// paths with the original, and that pruning nothing, or a path the tree lacks, keeps the tree.
func TestPruneKeepsWhatItDoesNotName(t *testing.T) {
	t.Parallel()
	s := newStorer()
	root, err := WriteFiles(s, map[string][]byte{
		"web/index.html": []byte("<p>hi</p>\n"),
		"api/main.go":    []byte("package main\n"),
		"api/db/db.go":   []byte("package db\n"),
		"go.mod":         []byte("module x\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, paths := range [][]string{nil, {"docs/"}, {"api/db/db.go/"}, {"web/index.htm"}} {
		if got, err := Prune(s, root, paths); err != nil || got != root {
			t.Errorf("Prune %q = %s, %v; want the tree itself, %s", paths, got, err, root)
		}
	}
	got, err := Prune(s, root, []string{"api/", "go.mod"})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := TreeEntries(s, got)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	if strings.Join(names, " ") != "web" {
		t.Fatalf("pruned tree holds %v, want [web]", names)
	}
	orig, err := TreeEntries(s, root)
	if err != nil {
		t.Fatal(err)
	}
	i, _ := FindTreeEntry(orig, "web")
	if entries[0].Hash != orig[i].Hash {
		t.Errorf("web/ is %s after pruning, %s before: an untouched subtree was written again", entries[0].Hash, orig[i].Hash)
	}
	all, err := Prune(s, root, []string{"web/", "api/", "go.mod"})
	if err != nil || all != EmptyTree {
		t.Errorf("pruning every path = %s, %v; want the empty tree %s", all, err, EmptyTree)
	}
}
