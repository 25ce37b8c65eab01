package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/store/sqlite"
)

// TestDatabaseFilesAreTheOwnersOnly ensures the database and its WAL and shared-memory files,
// which hold token hashes and every repository's files, are readable by their owner only,
// whatever the umask, and that their directory is too.
func TestDatabaseFilesAreTheOwnersOnly(t *testing.T) {
	old := syscall.Umask(0o002) // a permissive umask, as on many desktops
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "ag-data")
	path := filepath.Join(dir, "ag.db")
	st, err := sqlite.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, err := st.EnqueueJob(context.Background(), store.EnqueueJobParams{Kind: "ag.noop", MaxAttempts: 1}); err != nil {
		t.Fatal(err) // a write, so the WAL exists
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %o, want 600", filepath.Base(name), mode)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		t.Errorf("%s has mode %o, want no access for group and others", dir, mode)
	}
}

// TestAnOlderDatabaseIsMadeTheOwnersOnly ensures a database an earlier build left readable by
// everyone (0644, with its WAL) is made the owner's only when it is opened.
func TestAnOlderDatabaseIsMadeTheOwnersOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ag.db")
	st, err := sqlite.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.EnqueueJob(context.Background(), store.EnqueueJobParams{Kind: "ag.noop", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal"} {
		if err := os.Chmod(name, 0o644); err != nil { // as the earlier build left it
			t.Fatal(err)
		}
	}
	st.Close()
	st, err = sqlite.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{path, path + "-wal"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %o after opening, want 600", filepath.Base(name), mode)
		}
	}
}
