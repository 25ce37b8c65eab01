// Package syncbuf is a bytes.Buffer that a writer (a process's output, a logger) and the test
// reading it may use at once.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is safe for one writer and any number of readers at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String answers everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines answers the non-empty lines written so far that contain every one of subs.
func (b *Buffer) Lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		keep := line != ""
		for _, sub := range subs {
			keep = keep && strings.Contains(line, sub)
		}
		if keep {
			out = append(out, line)
		}
	}
	return out
}
