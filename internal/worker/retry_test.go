package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// syncbuf.Buffer is a bytes.Buffer several goroutines may log to.
var errDown = connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:7777: connect: connection refused"))

// TestTransient ensures only the errors that may go away by themselves are waited out.
func TestTransient(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		errDown: true,
		connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow")):      true,
		connect.NewError(connect.CodeInternal, errors.New("internal error")):    true,
		fmt.Errorf("register worker key k: %w", errDown):                        true,
		connect.NewError(connect.CodeUnauthenticated, errors.New("bad token")):  false,
		connect.NewError(connect.CodePermissionDenied, errors.New("not yours")): false,
		connect.NewError(connect.CodeUnimplemented, errors.New("404")):          false,
		errors.New("open k: permission denied"):                                 false,
	} {
		if got := Transient(err); got != want {
			t.Errorf("Transient(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestWaitForServer ensures WaitForServer calls again after transient errors until the call
// works, logging the wait and its end; answers at once an error that is not transient; and
// stops waiting when its context ends.
func TestWaitForServer(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	calls := 0
	err := WaitForServer(context.Background(), log, "register this worker's key", func(context.Context) error {
		if calls++; calls <= 3 {
			return errDown
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Errorf("WaitForServer = %v after %d calls, want nil after 4", err, calls)
	}
	if n := strings.Count(logs.String(), `level=WARN msg="the server does not answer; waiting for it" to="register this worker's key"`); n < 1 || n > 3 {
		t.Errorf("%d lines for 3 failures, want 1 to 3:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `level=INFO msg="the server answers again"`) {
		t.Errorf("the end of the wait was not logged:\n%s", logs.String())
	}

	denied := connect.NewError(connect.CodeUnauthenticated, errors.New("bad token"))
	calls = 0
	if err := WaitForServer(context.Background(), log, "x", func(context.Context) error { calls++; return denied }); !errors.Is(err, denied) || calls != 1 {
		t.Errorf("WaitForServer of a refused call = %v after %d calls, want the refusal after 1", err, calls)
	}

	// In a bubble, synctest.Wait returns once WaitForServer waits out its backoff, and again
	// once it did all it would on the end of its context, the bubble's clock still: a wait that
	// ignored the context would still be waiting.
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- WaitForServer(ctx, log, "x", func(context.Context) error { return errDown }) }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("WaitForServer when its context ended = %v, want context.Canceled", err)
			}
		default:
			t.Error("WaitForServer did not stop when its context ended: it waits out its backoff")
			<-done
		}
	})
}

// TestOutageDoesNotFlood ensures a burst of failed calls, as the loops of a worker with a high
// --concurrency make when the server goes away, is one line in the log, and that the next
// outage is logged again.
func TestOutageDoesNotFlood(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	o := &outage{log: slog.New(slog.NewTextHandler(&logs, nil))}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				o.failed("claim a job", errDown, time.Minute)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("800 failures at once made %d lines, want 1:\n%s", n, logs.String())
	}
	o.answered()
	o.answered()
	if n := strings.Count(logs.String(), `msg="the server answers again"`); n != 1 {
		t.Errorf("the end of the outage made %d lines, want 1", n)
	}
	o.failed("claim a job", connect.NewError(connect.CodePermissionDenied, errors.New("not a worker")), time.Second)
	if !strings.Contains(logs.String(), `msg="the server refuses the call; trying again (this needs an operator)"`) {
		t.Errorf("a second outage, of refusals, was not logged as such:\n%s", logs.String())
	}
}
