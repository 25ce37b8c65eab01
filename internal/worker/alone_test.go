package worker

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/attest"
)

// The runs of these tests share the host's files (the validator runs them unsandboxed), so
// that one can do to another what candidates validated side by side could do through what
// they share: hold something the other needs.

// besideEnv is a validator whose runs share the directory dir, with the public key of its
// signer.
type besideEnv struct {
	v   *Validator
	pub ed25519.PublicKey
	dir string
	tdg string
}

func newBesideEnv(t *testing.T) *besideEnv {
	t.Helper()
	needUnix(t)
	c, treeDigest, signer, pub := serveCandidate(t, map[string]string{"a.txt": "a is fine\n"})
	return &besideEnv{
		v: &Validator{Client: c, Signer: signer, CacheDir: t.TempDir(),
			WorkDir: t.TempDir(), Unsandboxed: true, KillGrace: 200 * time.Millisecond},
		pub: pub, dir: t.TempDir(), tdg: treeDigest,
	}
}

// validate runs script as the command of job id and answers the result its attestation signs.
func (e *besideEnv) validate(t *testing.T, id, script string) string {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{
		"repository": "app", "change": "chg_" + id, "candidate_revision": "rev_1", "tree_digest": e.tdg,
		"command": []any{"sh", "-c", script}, "timeout": "1m", "env": map[string]any{"SHARED": e.dir},
	})
	if err != nil {
		t.Error(err)
		return ""
	}
	out, err := e.v.Handle(context.Background(), &Job{Job: &agwpv1.Job{Id: id, Kind: client.KindValidate, Payload: s, Attempts: 1, ClaimedBy: "ci|w1"}})
	if err != nil {
		t.Errorf("Handle %s: %v", id, err)
		return ""
	}
	v, _, err := attest.VerifyValidation(context.Background(), attest.FromProto(out.Attestation), [][]byte{e.pub})
	if err != nil {
		t.Errorf("verify the attestation of %s: %v", id, err)
		return ""
	}
	return v.Result
}

// runs answers how many times the command that counts itself in name ran.
func (e *besideEnv) runs(t *testing.T, name string) int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(e.dir, name))
	return strings.Count(string(b), "run\n")
}

// holderScript holds "the port" (the file busy) until the run beside it failed once, then
// lets go and passes.
const holderScript = `touch "$SHARED/busy"
while [ ! -e "$SHARED/failed-once" ]; do sleep 0.01; done
rm "$SHARED/busy"
echo "held the port, and let go"`

// TestARunThatFailedBesideAnotherRunsAgainAlone ensures a candidate whose run failed while
// another candidate's run held what it needed is run again once nothing else runs on the
// worker, and attested by that run: an honest change is not rejected for what its neighbour
// did. A candidate that fails alone too is still a failure, and a run that failed with nothing
// beside it runs once.
func TestARunThatFailedBesideAnotherRunsAgainAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, script string
		want         string
		wantRuns     int
	}{
		{"honest", `echo run >> "$SHARED/honest"
if [ -e "$SHARED/busy" ]; then echo "address already in use"; touch "$SHARED/failed-once"; exit 1; fi
echo "tests pass"`, attest.ResultPassed, 2},
		{"broken", `echo run >> "$SHARED/broken"
touch "$SHARED/failed-once"
echo "FAIL: broken"; exit 1`, attest.ResultFailed, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newBesideEnv(t)
			var wg sync.WaitGroup
			var holder string
			wg.Go(func() { holder = e.validate(t, "job_holder", holderScript) })
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
				if _, err := os.Stat(filepath.Join(e.dir, "busy")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the holder's run never took the port")
				}
			}
			got := e.validate(t, "job_"+c.name, c.script)
			wg.Wait()
			if got != c.want || holder != attest.ResultPassed {
				t.Errorf("%s beside the holder: %s (the holder %s), want %s (the holder PASSED)", c.name, got, holder, c.want)
			}
			if n := e.runs(t, c.name); n != c.wantRuns {
				t.Errorf("%s ran %d times, want %d: once beside the holder, once alone", c.name, n, c.wantRuns)
			}
		})
	}

	t.Run("alone from the start", func(t *testing.T) {
		t.Parallel()
		e := newBesideEnv(t)
		if got := e.validate(t, "job_alone", `echo run >> "$SHARED/alone"; exit 1`); got != attest.ResultFailed {
			t.Errorf("a failing run alone: %s, want FAILED", got)
		}
		if n := e.runs(t, "alone"); n != 1 {
			t.Errorf("a run that failed alone ran %d times, want once", n)
		}
	})
}
