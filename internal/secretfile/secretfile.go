// Package secretfile creates files that hold private keys: readable by their owner only, never
// seen half written, and never overwritten.
package secretfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Create writes data to a new file at path, mode 0600, creating its directory (0700) when
// missing. The data goes to a temporary file in the same directory that is synced and then
// linked into place, so a reader sees the whole file or none, and two processes creating the
// same file at once get one winner: the other gets an error that is fs.ErrExist, as O_EXCL
// would give, and reads the winner's file.
func Create(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory of %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, ".secret-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	// CreateTemp makes the file 0600 already; say so for whoever changes this.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Link(f.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}
