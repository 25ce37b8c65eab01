package store

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LeaseExpiredError is the last_error of a job whose expired claim used its last attempt.
const LeaseExpiredError = "lease expired"

// Backoff is the retry delay of a failed attempt when the worker gives none: 1s doubled per
// attempt, at most 10 minutes. It is deterministic so that retries are testable with a clock.
func Backoff(attempts uint32) time.Duration {
	const limit = 10 * time.Minute
	if attempts == 0 {
		attempts = 1
	}
	if attempts > 10 {
		return limit
	}
	d := time.Second << (attempts - 1)
	return min(d, limit)
}

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID answers a random opaque id with a readable prefix, such as "job_9x2k...".
func NewID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "_" + idEncoding.EncodeToString(b[:])
}

// EncodeSeqPageToken turns the position of the last row of a page into an opaque token.
func EncodeSeqPageToken(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("s" + strconv.FormatInt(seq, 10)))
}

// DecodeSeqPageToken reads a token of EncodeSeqPageToken; "" is the first page (0).
func DecodeSeqPageToken(token string) (int64, error) {
	if token == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 2 || raw[0] != 's' {
		return 0, fmt.Errorf("%w: malformed page token", ErrInvalidPageToken)
	}
	seq, err := strconv.ParseInt(string(raw[1:]), 10, 64)
	if err != nil || seq <= 0 {
		return 0, fmt.Errorf("%w: malformed page token", ErrInvalidPageToken)
	}
	return seq, nil
}

// EncodeNamePageToken turns the name of the last row of a page into an opaque token.
func EncodeNamePageToken(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("n" + name))
}

// DecodeNamePageToken reads a token of EncodeNamePageToken; "" is the first page ("").
func DecodeNamePageToken(token string) (string, error) {
	if token == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 2 || raw[0] != 'n' || strings.ContainsRune(string(raw), 0) {
		return "", fmt.Errorf("%w: malformed page token", ErrInvalidPageToken)
	}
	return string(raw[1:]), nil
}

// ErrInvalidPageToken: a page token this store did not hand out.
var ErrInvalidPageToken = errors.New("invalid page token")

// Signal is a broadcast that waiters take before they look and that is fired after a commit.
// Fire closes the current channel and starts a new one; it never blocks.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait answers the channel that the next Fire closes.
func (s *Signal) Wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Fire wakes every waiter of the current channel.
func (s *Signal) Fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Reusable keeps one value, such as a seal's buffers, for the next user: Take lends it to one
// user at a time, and Give takes it back once that user is done with it.
type Reusable[T any] struct {
	mu   sync.Mutex
	lent bool
	kept T
}

// Take lends the kept value; owned is false when another user has it, and v is then the zero
// value, for the caller to fill as its own.
func (r *Reusable[T]) Take() (v T, owned bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lent {
		var zero T
		return zero, false
	}
	r.lent = true
	return r.kept, true
}

// Give keeps v, what Take lent, grown or not, for the next Take; without owned it does nothing.
func (r *Reusable[T]) Give(v T, owned bool) {
	if !owned {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kept, r.lent = v, false
}
