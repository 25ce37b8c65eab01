package store_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// The store's rules of leases, claims and integrates are written once in this package and
// applied by every backend (conformance suite, internal/store/storetest). These tests hold each
// rule alone, case by case and at each edge, as the words a refused caller reads: they are what
// the mutation run of this package (scripts/mutation) answers to.

var (
	ruleClaimedAt = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	ruleExpiresAt = ruleClaimedAt.Add(15 * time.Minute)
	ruleEndedAt   = ruleClaimedAt.Add(5 * time.Minute)
)

// wantRefusal fails unless err is a refusal of the kind is (errors.Is) whose text is msg.
func wantRefusal(t *testing.T, what string, err error, is error, msg string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no refusal; want %q", what, msg)
	case !errors.Is(err, is):
		t.Errorf("%s: %q is not %v", what, err, is)
	case err.Error() != msg:
		t.Errorf("%s:\n got %q\nwant %q", what, err, msg)
	}
}

// wantOutcome fails unless err is nil when want is "", and otherwise the refusal wantRefusal
// asks for.
func wantOutcome(t *testing.T, what string, err error, is error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: %v; want it to pass", what, err)
		}
		return
	}
	wantRefusal(t, what, err, is, want)
}

// claimedTask is task t_1 claimed by alice|w1 as its third claim, current and not expired.
func claimedTask() store.Task {
	return store.Task{ID: "t_1", State: store.TaskClaimed, Attempts: 3, Claimant: "alice|w1",
		ClaimedAt: ruleClaimedAt, ClaimExpiresAt: ruleExpiresAt, ClaimCurrent: true}
}

// TestCheckTaskClaimRefusesEveryClaimButTheCurrentOne holds ADR-0012's fence of a task claim:
// only the latest claim number, of its holder, while the claim is current, passes.
func TestCheckTaskClaimRefusesEveryClaimButTheCurrentOne(t *testing.T) {
	with := func(change func(*store.Task)) store.Task {
		task := claimedTask()
		change(&task)
		return task
	}
	for _, tc := range []struct {
		name   string
		task   store.Task
		holder string
		claim  uint64
		want   string // "" passes
	}{
		{"the current claim", claimedTask(), "alice|w1", 3, ""},
		{"an admin's check of anyone's claim", claimedTask(), "", 3, ""},
		{"a claim that expired but nobody took", with(func(t *store.Task) { t.State = store.TaskOpen }), "alice|w1", 3, ""},
		{"no claim number", claimedTask(), "alice|w1", 0,
			"task t_1 claim number 0 is no claim: send the claim_number ClaimTask answered"},
		{"a claim never made", claimedTask(), "alice|w1", 4, "task t_1 claim 4 was never made, the latest claim is 3"},
		{"a stale claim", claimedTask(), "alice|w1", 2,
			"task t_1 claim 2 is stale: claimed again as claim 3 by alice|w1 at 2026-12-07T09:00:00Z"},
		{"the first claim, stale", claimedTask(), "alice|w1", 1,
			"task t_1 claim 1 is stale: claimed again as claim 3 by alice|w1 at 2026-12-07T09:00:00Z"},
		{"another holder's claim", claimedTask(), "alice|w2", 3, "task t_1 claim 3 is alice|w1's, not alice|w2's"},
		{"a task a change finished", with(func(t *store.Task) { t.State, t.ChangeID = store.TaskDone, "c_9" }), "alice|w1", 3,
			"task t_1 is done: change c_9 finished it"},
		{"a task done by hand", with(func(t *store.Task) { t.State = store.TaskDone }), "alice|w1", 3, "task t_1 is done"},
		{"a cancelled task", with(func(t *store.Task) { t.State = store.TaskCancelled }), "alice|w1", 3, "task t_1 was cancelled"},
		{"a released claim", with(func(t *store.Task) { t.State, t.ClaimCurrent = store.TaskOpen, false }), "alice|w1", 3,
			"task t_1 claim 3 was released"},
	} {
		wantOutcome(t, tc.name, store.CheckTaskClaim(tc.task, tc.holder, tc.claim), store.ErrFailedPrecondition, tc.want)
	}
}

// TestExplainTaskClaimTakesAnOpenReadyTaskOrTheHoldersOwn holds who may claim a task: an open
// and ready one, or one the same holder claimed (a restart); another's live claim is a
// conflict, as a path leased by another is.
func TestExplainTaskClaimTakesAnOpenReadyTaskOrTheHoldersOwn(t *testing.T) {
	open := store.Task{ID: "t_1", State: store.TaskOpen, Attempts: 3, Claimant: "alice|w1", ClaimedAt: ruleClaimedAt}
	blocker := store.Task{ID: "t_0", State: store.TaskClaimed}
	for _, tc := range []struct {
		name     string
		task     store.Task
		holder   string
		blocking *store.Task
		is       error
		want     string
	}{
		{"an open task", open, "bob|w1", nil, nil, ""},
		{"the holder's own claim", claimedTask(), "alice|w1", nil, nil, ""},
		{"another's claim", claimedTask(), "alice|w2", nil, store.ErrLeaseConflict,
			"task t_1 is claimed by alice|w1 (claim 3) since 2026-12-07T09:00:00Z until 2026-12-07T09:15:00Z"},
		{"another's claim of a task not ready", claimedTask(), "alice|w2", &blocker, store.ErrLeaseConflict,
			"task t_1 is claimed by alice|w1 (claim 3) since 2026-12-07T09:00:00Z until 2026-12-07T09:15:00Z"},
		{"a task not ready", open, "bob|w1", &blocker, store.ErrFailedPrecondition,
			"task t_1 is not ready: it depends on t_0, which is claimed"},
		{"the holder's own claim of a task not ready", claimedTask(), "alice|w1", &blocker, store.ErrFailedPrecondition,
			"task t_1 is not ready: it depends on t_0, which is claimed"},
		{"a task a change finished", store.Task{ID: "t_1", State: store.TaskDone, ChangeID: "c_9"}, "bob|w1", nil,
			store.ErrFailedPrecondition, "task t_1 is done: change c_9 finished it"},
		{"a task done by hand", store.Task{ID: "t_1", State: store.TaskDone}, "bob|w1", nil,
			store.ErrFailedPrecondition, "task t_1 is done"},
		{"a cancelled task", store.Task{ID: "t_1", State: store.TaskCancelled, ChangeID: "c_9"}, "bob|w1", nil,
			store.ErrFailedPrecondition, "task t_1 was cancelled"},
	} {
		wantOutcome(t, tc.name, store.ExplainTaskClaim(tc.task, tc.holder, tc.blocking), tc.is, tc.want)
	}
}

// TestExplainTaskClaimChangeIsTheClaimantsPrincipalsOrAnAdmins holds who may renew or release a
// claim: the claimant's principal (any of its labels) or an admin, with the current claim.
func TestExplainTaskClaimChangeIsTheClaimantsPrincipalsOrAnAdmins(t *testing.T) {
	for _, tc := range []struct {
		name      string
		principal string
		admin     bool
		claim     uint64
		want      string
	}{
		{"the claimant's principal", "alice", false, 3, ""},
		{"an admin", "root", true, 3, ""},
		{"another principal", "bob", false, 3, `task t_1 is claimed by alice|w1: principal "bob" may not change its claim`},
		{"a principal named as the claimant's label", "w1", false, 3, `task t_1 is claimed by alice|w1: principal "w1" may not change its claim`},
		{"an admin with a stale claim", "root", true, 2,
			"task t_1 claim 2 is stale: claimed again as claim 3 by alice|w1 at 2026-12-07T09:00:00Z"},
		{"another principal with a stale claim", "bob", false, 2,
			"task t_1 claim 2 is stale: claimed again as claim 3 by alice|w1 at 2026-12-07T09:00:00Z"},
	} {
		wantOutcome(t, tc.name, store.ExplainTaskClaimChange(claimedTask(), tc.principal, tc.admin, tc.claim), store.ErrFailedPrecondition, tc.want)
	}
}

// TestAClaimReadsAsOpenFromItsExpiry holds that a claim ends at its expiry to the nanosecond,
// and that expiry changes no other state.
func TestAClaimReadsAsOpenFromItsExpiry(t *testing.T) {
	for _, tc := range []struct {
		stored store.TaskState
		now    time.Time
		want   store.TaskState
	}{
		{store.TaskClaimed, ruleExpiresAt.Add(-time.Nanosecond), store.TaskClaimed},
		{store.TaskClaimed, ruleExpiresAt, store.TaskOpen},
		{store.TaskClaimed, ruleExpiresAt.Add(time.Hour), store.TaskOpen},
		{store.TaskDone, ruleExpiresAt.Add(time.Hour), store.TaskDone},
		{store.TaskCancelled, ruleExpiresAt.Add(time.Hour), store.TaskCancelled},
		{store.TaskOpen, ruleExpiresAt.Add(-time.Hour), store.TaskOpen},
	} {
		if got := store.StateAt(tc.stored, ruleExpiresAt, tc.now); got != tc.want {
			t.Errorf("StateAt(%s, expiry%+v) = %s, want %s", tc.stored, tc.now.Sub(ruleExpiresAt), got, tc.want)
		}
	}
}

// TestAJobsClaimIsItsHoldersWithItsNumber holds the fence of a job's claim (heartbeat, complete,
// fail): the job claimed, by the holder, with the current claim number (0: a caller that sends
// none, as before claim numbers), and a validate job completed only with an attestation.
func TestAJobsClaimIsItsHoldersWithItsNumber(t *testing.T) {
	job := store.Job{ID: "j_1", Kind: store.KindValidate, State: store.JobClaimed, Holder: "ci|w1", ClaimNumber: 4}
	other := job
	other.Kind = "build"
	queued := job
	queued.State = store.JobQueued
	for _, tc := range []struct {
		name     string
		job      store.Job
		holder   string
		claim    uint32
		attested bool
		is       error
		want     string
	}{
		{"the current claim, attested", job, "ci|w1", 4, true, nil, ""},
		{"no claim number, attested", job, "ci|w1", 0, true, nil, ""},
		{"another kind, not attested", other, "ci|w1", 4, false, nil, ""},
		{"a validate job, not attested", job, "ci|w1", 4, false, store.ErrAttestationRequired,
			"job j_1: a validate job is completed only with an attestation"},
		{"a stale claim", job, "ci|w1", 3, true, store.ErrLostClaim,
			"job j_1: claim 3 is stale, the current claim is 4: stop working on it"},
		{"a claim never made", job, "ci|w1", 5, true, store.ErrLostClaim,
			"job j_1: claim 5 was never made, the current claim is 4: send the attempts of the job as it was claimed"},
		{"another holder", job, "ci|w2", 4, true, store.ErrLostClaim, "job j_1 is claimed by ci|w1 (claim 4), not by ci|w2"},
		{"another holder without a number", job, "ci|w2", 0, true, store.ErrLostClaim, "job j_1 is claimed by ci|w1 (claim 4), not by ci|w2"},
		{"a job no longer claimed", queued, "ci|w1", 4, true, store.ErrLostClaim, "job j_1 is queued, not claimed: the claim of ci|w1 is over"},
	} {
		wantOutcome(t, tc.name, store.ExplainRefusedCompletion(tc.job, tc.holder, tc.claim, tc.attested), tc.is, tc.want)
	}
}

// TestALeaseChangesOnlyByItsHolderWithItsTokenUntilSuperseded holds who may renew or release a
// lease: not once it ended; its holder's principal or an admin; with its own token when one is
// given; and, once expired, only while no later grant overlaps it, which is looked up then only.
func TestALeaseChangesOnlyByItsHolderWithItsTokenUntilSuperseded(t *testing.T) {
	active := store.Lease{ID: "l_1", Holder: "alice|w1", FencingToken: 7, State: store.LeaseActive, ExpiresAt: ruleExpiresAt}
	ended := func(s store.LeaseState) store.Lease {
		l := active
		l.State, l.EndedAt = s, ruleEndedAt
		return l
	}
	later := store.Grant{Token: 9, Holder: "bob|w1", Path: "src/"}
	lookupFailed := errors.New("the database is down")
	for _, tc := range []struct {
		name      string
		lease     store.Lease
		principal string
		admin     bool
		token     uint64
		expired   bool
		grant     *store.Grant // the later grant found; nil: none
		grantErr  error
		asks      bool // whether the later grant is looked up
		want      string
		wantErr   error
	}{
		{name: "its holder's principal", lease: active, principal: "alice", token: 7},
		{name: "its holder, no token", lease: active, principal: "alice"},
		{name: "an admin", lease: active, principal: "root", admin: true, token: 7},
		{name: "another principal", lease: active, principal: "bob", token: 7,
			want: `lease l_1: is held by alice|w1: principal "bob" may not change it`},
		{name: "another token", lease: active, principal: "alice", token: 6,
			want: "lease l_1: token 6 is not this lease's token 7"},
		{name: "an admin with another token", lease: active, principal: "root", admin: true, token: 8,
			want: "lease l_1: token 8 is not this lease's token 7"},
		{name: "released", lease: ended(store.LeaseReleased), principal: "alice", token: 7,
			want: "lease l_1: was released at 2026-12-07T09:05:00Z: acquire a new lease"},
		{name: "broken, asked by an admin", lease: ended(store.LeaseBroken), principal: "root", admin: true,
			want: "lease l_1: was broken at 2026-12-07T09:05:00Z: acquire a new lease"},
		{name: "expired, nobody since", lease: active, principal: "alice", token: 7, expired: true, asks: true},
		{name: "expired and superseded", lease: active, principal: "alice", token: 7, expired: true, grant: &later, asks: true,
			want: "lease l_1: expired at 2026-12-07T09:15:00Z and was superseded by token 9 granted to bob|w1 on src/: acquire a new lease"},
		{name: "expired, the lookup failing", lease: active, principal: "alice", expired: true, grantErr: lookupFailed, asks: true,
			wantErr: lookupFailed},
		{name: "expired, of another principal", lease: active, principal: "bob", expired: true, grant: &later,
			want: `lease l_1: is held by alice|w1: principal "bob" may not change it`},
	} {
		asked := false
		err := store.ExplainLeaseChange(tc.lease, tc.principal, tc.admin, tc.token, tc.expired, func() (store.Grant, bool, error) {
			asked = true
			if tc.grant != nil {
				return *tc.grant, true, tc.grantErr
			}
			return store.Grant{}, false, tc.grantErr
		})
		if asked != tc.asks {
			t.Errorf("%s: later grant looked up: %v, want %v", tc.name, asked, tc.asks)
		}
		if tc.wantErr != nil {
			if err != tc.wantErr {
				t.Errorf("%s: %v; want the lookup's error %v as it is", tc.name, err, tc.wantErr)
			}
			continue
		}
		wantOutcome(t, tc.name, err, store.ErrFailedPrecondition, tc.want)
	}
}

// TestIntegrateNeedsTheHoldersLatestLiveUnsupersededLeaseOnEachPath holds Integrate's lease
// check: per path in order, the holder's lease among the tokens with the largest token, active,
// and with no later grant overlapping the path; the refusal names the first path that fails.
func TestIntegrateNeedsTheHoldersLatestLiveUnsupersededLeaseOnEachPath(t *testing.T) {
	lease := func(id, holder string, token uint64, state store.LeaseState) store.Lease {
		return store.Lease{ID: id, Holder: holder, FencingToken: token, State: state, EndedAt: ruleEndedAt}
	}
	mine5 := lease("l_5", "alice|w1", 5, store.LeaseActive)
	mine8 := lease("l_8", "alice|w1", 8, store.LeaseActive)
	mine8Released := lease("l_8", "alice|w1", 8, store.LeaseReleased)
	theirs6 := lease("l_6", "bob|w1", 6, store.LeaseActive)
	theirs3 := lease("l_3", "alice|w2", 3, store.LeaseActive)
	lookupFailed := errors.New("the database is down")

	type ask struct {
		path  int
		token uint64
	}
	for _, tc := range []struct {
		name     string
		paths    []string
		covering [][]store.Lease
		later    map[int]store.Grant // a later grant per path index
		laterErr error
		want     string // "" passes
		wantErr  error
		asks     []ask
	}{
		{name: "each path leased", paths: []string{"a", "b"},
			covering: [][]store.Lease{{mine5}, {mine8}}, asks: []ask{{0, 5}, {1, 8}}},
		{name: "the largest of the holder's tokens is checked", paths: []string{"a"},
			covering: [][]store.Lease{{mine8, mine5, theirs6}}, asks: []ask{{0, 8}}},
		{name: "the largest token, listed last", paths: []string{"a"},
			covering: [][]store.Lease{{mine5, theirs6, mine8}}, asks: []ask{{0, 8}}},
		{name: "the latest lease, released", paths: []string{"a"},
			covering: [][]store.Lease{{mine5, mine8Released}},
			want:     "a: lease l_8 (token 8) was released at 2026-12-07T09:05:00Z"},
		{name: "no lease of the holder", paths: []string{"a", "b"},
			covering: [][]store.Lease{{mine5}, nil}, asks: []ask{{0, 5}},
			want: "b: not leased by alice|w1 among the given tokens [5 6]: acquire a lease that covers it"},
		{name: "only leases of others, each named once and in order", paths: []string{"a"},
			covering: [][]store.Lease{{theirs6, theirs3, theirs6}},
			want:     "a: not leased by alice|w1 among the given tokens [5 6]" + " (token 3 is alice|w2's, token 6 is bob|w1's): acquire a lease that covers it"},
		{name: "superseded", paths: []string{"a", "b"},
			covering: [][]store.Lease{{mine5}, {mine8}}, later: map[int]store.Grant{1: {Token: 9, Holder: "bob|w1", Path: "b/"}},
			asks: []ask{{0, 5}, {1, 8}},
			want: "b: token 8 is stale: superseded by token 9 granted to bob|w1 on b/"},
		{name: "the first refusal only", paths: []string{"a", "b"},
			covering: [][]store.Lease{{mine5}, nil}, later: map[int]store.Grant{0: {Token: 9, Holder: "bob|w1", Path: "a"}},
			asks: []ask{{0, 5}},
			want: "a: token 5 is stale: superseded by token 9 granted to bob|w1 on a"},
		{name: "the lookup failing", paths: []string{"a", "b"},
			covering: [][]store.Lease{{mine5}, {mine8}}, laterErr: lookupFailed, asks: []ask{{0, 5}}, wantErr: lookupFailed},
	} {
		var asked []ask
		p := store.IntegrateParams{Holder: "alice|w1", FencingTokens: []uint64{5, 6}, Paths: tc.paths}
		err := store.CheckIntegrateLeases(p, tc.covering, func(i int, token uint64) (store.Grant, bool, error) {
			asked = append(asked, ask{i, token})
			if tc.laterErr != nil {
				return store.Grant{}, false, tc.laterErr
			}
			g, ok := tc.later[i]
			return g, ok, nil
		})
		if len(asked) != len(tc.asks) {
			t.Errorf("%s: later grants looked up for %v, want %v", tc.name, asked, tc.asks)
		} else {
			for k := range asked {
				if asked[k] != tc.asks[k] {
					t.Errorf("%s: later grants looked up for %v, want %v", tc.name, asked, tc.asks)
					break
				}
			}
		}
		if tc.wantErr != nil {
			if err != tc.wantErr {
				t.Errorf("%s: %v; want the lookup's error %v as it is", tc.name, err, tc.wantErr)
			}
			continue
		}
		wantOutcome(t, tc.name, err, store.ErrFailedPrecondition, tc.want)
		if tc.want != "" {
			var refusal *store.IntegrateRefusal
			wantPath, _, _ := strings.Cut(tc.want, ": ")
			if !errors.As(err, &refusal) || refusal.Path != wantPath {
				t.Errorf("%s: %#v is no IntegrateRefusal naming the path %q", tc.name, err, wantPath)
			}
		}
	}
}

// TestErrorsOfTheStoreAreTheirKind holds that each refusal of the store is told by its kind
// (errors.Is), which the server maps to the contract's code, and says what it refuses.
func TestErrorsOfTheStoreAreTheirKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		is   error
		want string
	}{
		{&store.StateError{What: "job j_1", Msg: "is done"}, store.ErrFailedPrecondition, "job j_1 is done"},
		{&store.SchemaTooNewError{Database: 30, Known: 22}, store.ErrSchemaTooNew,
			"database schema version 30 is newer than this build of ag knows (22): run a newer ag"},
		{&store.TaskRefusal{Msg: "unknown dependency t_9"}, store.ErrInvalidTask, "unknown dependency t_9"},
		{&store.RateError{Principal: "alice", What: "tasks", Max: 60}, store.ErrResourceExhausted,
			"principal alice created 60 tasks in the last minute, its most: wait before creating more"},
		{&store.RateError{Principal: "alice", What: "messages", Max: 120}, store.ErrResourceExhausted,
			"principal alice sent 120 messages in the last minute, its most: wait before sending more"},
	} {
		wantRefusal(t, tc.want, tc.err, tc.is, tc.want)
		for _, other := range []error{store.ErrFailedPrecondition, store.ErrSchemaTooNew, store.ErrInvalidTask, store.ErrResourceExhausted} {
			if other != tc.is && errors.Is(tc.err, other) {
				t.Errorf("%q is also %v", tc.err, other)
			}
		}
	}
}

// TestAnErrorIsUnavailableOnlyWhenItSaysSo holds which errors make a caller retry: none, an
// error of no database, and what a backend's classifier says, with whether it surely did not
// apply.
func TestAnErrorIsUnavailableOnlyWhenItSaysSo(t *testing.T) {
	lost := errors.New("connection lost during commit")
	store.RegisterUnavailable(func(err error) (bool, bool) { return errors.Is(err, lost), false })
	for _, tc := range []struct {
		err                    error
		unavailable, unapplied bool
	}{
		{nil, false, false},
		{errors.New("syntax error"), false, false},
		{store.ErrUnavailable, true, true},
		{fmt.Errorf("read: %w", store.ErrUnavailable), true, true},
		{fmt.Errorf("commit: %w", lost), true, false},
	} {
		u, n := store.Unavailable(tc.err)
		if u != tc.unavailable || n != tc.unapplied || store.IsUnavailable(tc.err) != tc.unavailable {
			t.Errorf("Unavailable(%v) = %v, %v; want %v, %v", tc.err, u, n, tc.unavailable, tc.unapplied)
		}
	}
}

// TestAPageTokenOfReadyTasksReadsBackAndNothingElseDoes holds the token of a page of ready
// tasks: what EncodeReadyPageToken wrote reads back, "" is the first page, and a token a client
// made up is invalid, never another place in the list.
func TestAPageTokenOfReadyTasksReadsBackAndNothingElseDoes(t *testing.T) {
	for _, place := range []struct {
		priority int32
		seq      int64
	}{{1, 2}, {-5, 7}, {math.MaxInt32, math.MaxInt64}, {math.MinInt32, 1}} {
		p, s, ok, err := store.DecodeReadyPageToken(store.EncodeReadyPageToken(place.priority, place.seq))
		if err != nil || !ok || p != place.priority || s != place.seq {
			t.Errorf("the token of %+v reads back as %d, %d, %v, %v", place, p, s, ok, err)
		}
	}
	if _, _, ok, err := store.DecodeReadyPageToken(""); ok || err != nil {
		t.Errorf(`DecodeReadyPageToken("") = %v, %v; want the first page`, ok, err)
	}
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, token := range []string{"!!", raw("r1:"), raw("x1:2"), raw("r1:0"), raw("r1:-3"), raw("r12"), raw("r1:x"),
		raw("rx:1"), raw("r2147483648:1"), raw("r1:2:3"), raw("r:1"), raw("r12:345678") + "!", raw("r12:345678") + "="} {
		if _, _, _, err := store.DecodeReadyPageToken(token); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("DecodeReadyPageToken(%q) = %v; want it refused", token, err)
		}
	}
}
