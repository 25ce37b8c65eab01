package store

import (
	"errors"
	"fmt"
	"time"
)

// Sentinels every backend answers with, so callers use errors.Is and never see driver errors.
var (
	// ErrNotFound: no such row.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a unique name or key is taken.
	ErrAlreadyExists = errors.New("already exists")
	// ErrLostClaim: the request names a claim that is not the job's current claim.
	ErrLostClaim = errors.New("claim lost")
	// ErrFailedPrecondition: the row is not in a state that allows the change.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrSchemaTooNew: the database was migrated by a newer build.
	ErrSchemaTooNew = errors.New("database schema is newer than this build")
	// ErrAttestationRequired: a validate job is completed only with an attestation, which is
	// what its change's gate decides on.
	ErrAttestationRequired = errors.New("a validate job is completed only with an attestation")
)

// KindValidate is the kind of the integration queue's validation jobs, which the store
// completes only with an attestation. It is the contract's agwp.KindValidate (a test holds them
// equal): the store keeps data and imports no part of the wire contract.
const KindValidate = "validate"

// ExplainRefusedCompletion answers the refusal for a completion whose conditional update
// matched no row: the claim is lost (ExplainLostClaim), or the job is a validate job and the
// completion carries no attestation. nil means the job, as read, would have been completed.
func ExplainRefusedCompletion(job Job, worker string, fencingToken uint32, attested bool) error {
	if err := ExplainLostClaim(job, worker, fencingToken); err != nil {
		return err
	}
	if job.Kind == KindValidate && !attested {
		return fmt.Errorf("job %s: %w", job.ID, ErrAttestationRequired)
	}
	return nil
}

// LostClaimError explains why a heartbeat, completion or failure was refused: the job is no
// longer claimed by this holder, or the claim number is not the current one.
type LostClaimError struct {
	JobID         string
	Holder        string   // the holder that asked
	ClaimNumber   uint32   // the claim number it sent, 0 = none
	State         JobState // the job as it is now
	CurrentHolder string   // the holder of the job's current or last claim
	CurrentClaim  uint32   // the job's current claim number
}

func (e *LostClaimError) Error() string {
	switch {
	case e.State != JobClaimed:
		return fmt.Sprintf("job %s is %s, not claimed: the claim of %s is over", e.JobID, e.State, e.Holder)
	case e.CurrentHolder != e.Holder:
		return fmt.Sprintf("job %s is claimed by %s (claim %d), not by %s", e.JobID, e.CurrentHolder, e.CurrentClaim, e.Holder)
	case e.ClaimNumber > e.CurrentClaim:
		// Not an old claim: a number no claim of this job has had, which a worker gets only by
		// sending something other than the claimed job's claim number (the API's attempts).
		return fmt.Sprintf("job %s: claim %d was never made, the current claim is %d: send the attempts of the job as it was claimed", e.JobID, e.ClaimNumber, e.CurrentClaim)
	default:
		return fmt.Sprintf("job %s: claim %d is stale, the current claim is %d: stop working on it", e.JobID, e.ClaimNumber, e.CurrentClaim)
	}
}

// Is makes errors.Is(err, ErrLostClaim) true.
func (e *LostClaimError) Is(target error) bool { return target == ErrLostClaim }

// ExplainLostClaim answers the refusal for a claim check that failed on job (as read in the
// same transaction): a *LostClaimError, or nil when the claim is in fact current, which a
// backend treats as an internal error.
func ExplainLostClaim(job Job, holder string, claimNumber uint32) error {
	if job.State == JobClaimed && job.Holder == holder && (claimNumber == 0 || claimNumber == job.ClaimNumber) {
		return nil
	}
	return &LostClaimError{
		JobID:         job.ID,
		Holder:        holder,
		ClaimNumber:   claimNumber,
		State:         job.State,
		CurrentHolder: job.Holder,
		CurrentClaim:  job.ClaimNumber,
	}
}

// StateError refuses a change that the row's state does not allow.
type StateError struct {
	What string // "job j_..."
	Msg  string
}

func (e *StateError) Error() string { return e.What + " " + e.Msg }

// Is makes errors.Is(err, ErrFailedPrecondition) true.
func (e *StateError) Is(target error) bool { return target == ErrFailedPrecondition }

// SchemaTooNewError refuses to run on a schema that a newer build migrated.
type SchemaTooNewError struct {
	Database, Known int
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this build of ag knows (%d): run a newer ag", e.Database, e.Known)
}

// Is makes errors.Is(err, ErrSchemaTooNew) true.
func (e *SchemaTooNewError) Is(target error) bool { return target == ErrSchemaTooNew }

// Grant names a lease grant: its token, holder, and the path by which it overlaps another.
type Grant struct {
	Token  uint64
	Holder string
	Path   string
}

// ExplainLeaseChange answers why a renew or release of l by principal (admin: anyone's) with
// token (0: not given) is refused, or nil: the lease ended, the caller is not its holder's
// principal, the token is not its token, or it expired and a later grant overlaps it. Backends
// pass whether l is expired now and how to find the first later overlapping grant, which is
// looked up only for an expired lease.
func ExplainLeaseChange(l Lease, principal string, admin bool, token uint64, expired bool,
	laterGrant func() (Grant, bool, error)) error {
	refuse := func(format string, a ...any) error {
		return &LeaseStateError{LeaseID: l.ID, Msg: fmt.Sprintf(format, a...)}
	}
	switch {
	case l.State == LeaseReleased || l.State == LeaseBroken:
		return refuse("was %s at %s: acquire a new lease", l.State, l.EndedAt.UTC().Format(time.RFC3339))
	case !admin && PrincipalOf(l.Holder) != principal:
		return refuse("is held by %s: principal %q may not change it", l.Holder, principal)
	case token != 0 && token != l.FencingToken:
		return refuse("token %d is not this lease's token %d", token, l.FencingToken)
	case !expired:
		return nil
	}
	g, found, err := laterGrant()
	if err != nil || !found {
		return err
	}
	return refuse("expired at %s and was superseded by token %d granted to %s on %s: acquire a new lease",
		l.ExpiresAt.UTC().Format(time.RFC3339), g.Token, g.Holder, g.Path)
}

// ErrUnavailable: the database cannot be reached or is not serving now (down, restarting, out
// of connections, closed); the same request may succeed later. The request was not applied.
var ErrUnavailable = errors.New("the database is unavailable")

// unavailableClassifiers are the backends' tests for a driver error meaning the database is
// unavailable, registered by each backend's package so that errors wrapped anywhere on the way
// are told.
var unavailableClassifiers []func(error) (unavailable, unapplied bool)

// RegisterUnavailable adds a backend's test for errors that mean the database is unavailable,
// and whether the failed request surely did not apply (it failed before its statements were
// sent, or its transaction surely rolled back) rather than maybe committed (a connection lost
// during a commit). It is called from the backend package's init.
func RegisterUnavailable(is func(error) (unavailable, unapplied bool)) {
	unavailableClassifiers = append(unavailableClassifiers, is)
}

// Unavailable reports whether err means the database cannot serve now, and whether the request
// surely did not apply, so that sending it again cannot apply it twice.
func Unavailable(err error) (unavailable, unapplied bool) {
	if err == nil {
		return false, false
	}
	if errors.Is(err, ErrUnavailable) {
		return true, true
	}
	for _, is := range unavailableClassifiers {
		if u, n := is(err); u {
			return true, n
		}
	}
	return false, false
}

// IsUnavailable reports whether err means the database cannot serve now.
func IsUnavailable(err error) bool {
	u, _ := Unavailable(err)
	return u
}
