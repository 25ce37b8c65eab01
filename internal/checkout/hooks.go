package checkout

import (
	"os"
	"path/filepath"
	"time"
)

// AgeCheckout moves the checkout at dir's index forward by d, as a clock would: its own scan
// stamp and its file's mtime, which bounds the stamp.
func AgeCheckout(dir string, d time.Duration) error {
	co, err := Find(dir)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	x, err := readIndex(root, co.Index)
	if err != nil {
		return err
	}
	x.stamp += d.Nanoseconds()
	if err := saveIndex(root, co.Index, x); err != nil {
		return err
	}
	later := time.Unix(0, x.stamp)
	return os.Chtimes(filepath.Join(dir, StateDir, co.Index), later, later)
}

// ScanCheckout answers the local edits of the checkout at dir as "kind path", and how many
// files the scan read and hashed.
func ScanCheckout(dir string) ([]string, int, error) {
	co, err := Find(dir)
	if err != nil {
		return nil, 0, err
	}
	s, err := co.scan()
	if err != nil {
		return nil, 0, err
	}
	edits, err := s.edits(co)
	if err != nil {
		return nil, 0, err
	}
	out := []string{}
	for _, e := range edits {
		out = append(out, e.Kind+" "+e.Path)
	}
	return out, len(s.hash), nil
}
