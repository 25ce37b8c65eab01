package store

import "time"

// MirrorState is where a repository's forge mirror stands.
type MirrorState string

// The states of a forge mirror.
const (
	// MirrorPending: set, and the mainline not pushed to it yet.
	MirrorPending MirrorState = "pending"
	// MirrorCurrent: the forge's branch is the mainline commit pushed last.
	MirrorCurrent MirrorState = "current"
	// MirrorDiverged: the forge's branch holds a commit the mainline does not; ag does not
	// overwrite it, and keeps landing.
	MirrorDiverged MirrorState = "diverged"
	// MirrorFailing: the last push did not reach the forge (unreachable, the credential refused);
	// it is tried again.
	MirrorFailing MirrorState = "failing"
)

// Mirror is a repository's forge mirror: where the server pushes its mainline after every
// landing.
type Mirror struct {
	Repository string
	URL        string // http(s)://, without credentials
	Branch     string // the forge's branch, "main"
	// Credential is what the server authenticates to the forge with: kept server-side, never
	// in an answer, an audit event or a log.
	Credential   []byte
	State        MirrorState
	PushedCommit string // the commit the forge's branch last got from ag, "" before the first push
	LastError    string // why the last push did not succeed, for DIVERGED and FAILING
	UpdatedAt    time.Time
}

// SetMirrorParams are the inputs of SetMirror: an empty URL removes the mirror.
type SetMirrorParams struct {
	Repository string
	URL        string
	Branch     string
	Credential []byte
}

// MirrorPushParams are the inputs of RecordMirrorPush: the outcome of a push to the mirror at URL.
type MirrorPushParams struct {
	Repository   string
	URL          string // the mirror pushed to: nothing is recorded when it changed since
	State        MirrorState
	PushedCommit string // "" keeps the one recorded
	LastError    string
}
