package gate

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Limits of a validation policy.
const (
	DefaultTimeout = 10 * time.Minute
	MaxTimeout     = 24 * time.Hour
	MinTimeout     = time.Second
	maxArgs        = 64
	maxArgBytes    = 4096
	maxEnv         = 64
	maxEnvValue    = 4096
	// MaxDepth bounds the candidates of one repository validating at once, and MaxBatch the
	// changes one candidate validates together.
	MaxDepth = 64
	MaxBatch = 64
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Policy is a repository's validation policy as stored: the command a worker runs on each
// candidate tree.
type Policy struct {
	Command []string          `json:"command"`
	Timeout Duration          `json:"timeout"`
	Env     map[string]string `json:"env,omitempty"`
	// Depth is how many candidates validate at once, each on the one ahead of it; 0: as many as
	// the validate workers seen recently (Gate.MaxDepth at most).
	Depth int `json:"depth,omitempty"`
	// Batch is how many changes one candidate validates together; 0 or 1: one.
	Batch int `json:"batch,omitempty"`
}

// WithQueue answers p with the queue's depth and batch, checked.
func (p Policy) WithQueue(depth, batch uint32) (Policy, error) {
	if depth > MaxDepth {
		return Policy{}, &PolicyError{"depth", fmt.Sprintf("%d is out of range (0, automatic, to %d)", depth, MaxDepth)}
	}
	if batch > MaxBatch {
		return Policy{}, &PolicyError{"batch", fmt.Sprintf("%d is out of range (0 or 1, one change a candidate, to %d)", batch, MaxBatch)}
	}
	if batch == 1 {
		batch = 0
	}
	p.Depth, p.Batch = int(depth), int(batch)
	return p, nil
}

// Duration is a time.Duration stored as its Go string ("10m0s"), readable in the database.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// PolicyError names the field of a policy that is not acceptable.
type PolicyError struct {
	Field string // "command", "command[2]", "timeout", "env[NAME]"
	Msg   string
}

func (e *PolicyError) Error() string { return e.Field + ": " + e.Msg }

// NewPolicy checks a policy's parts and answers it; a zero timeout is DefaultTimeout.
func NewPolicy(command []string, timeout time.Duration, env map[string]string) (Policy, error) {
	if len(command) == 0 {
		return Policy{}, &PolicyError{"command", "is required: the argv a worker runs, e.g. [\"go\", \"test\", \"./...\"]"}
	}
	if len(command) > maxArgs {
		return Policy{}, &PolicyError{"command", fmt.Sprintf("has %d arguments, more than %d", len(command), maxArgs)}
	}
	for i, a := range command {
		switch {
		case i == 0 && a == "":
			return Policy{}, &PolicyError{"command[0]", "is empty: name the program to run"}
		case len(a) > maxArgBytes:
			return Policy{}, &PolicyError{fmt.Sprintf("command[%d]", i), fmt.Sprintf("is longer than %d bytes", maxArgBytes)}
		case containsNUL(a):
			return Policy{}, &PolicyError{fmt.Sprintf("command[%d]", i), "contains a NUL byte"}
		}
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < MinTimeout || timeout > MaxTimeout {
		return Policy{}, &PolicyError{"timeout", fmt.Sprintf("%s is out of range (%s to %s)", timeout, MinTimeout, MaxTimeout)}
	}
	if len(env) > maxEnv {
		return Policy{}, &PolicyError{"env", fmt.Sprintf("has %d variables, more than %d", len(env), maxEnv)}
	}
	for k, v := range env {
		if !envName.MatchString(k) {
			return Policy{}, &PolicyError{"env", fmt.Sprintf("%q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", truncate(k, 80))}
		}
		if len(v) > maxEnvValue || containsNUL(v) {
			return Policy{}, &PolicyError{"env[" + k + "]", fmt.Sprintf("must be at most %d bytes without NUL", maxEnvValue)}
		}
	}
	if len(env) == 0 {
		env = nil
	}
	return Policy{Command: command, Timeout: Duration(timeout), Env: env}, nil
}

// Encode answers the stored form of a policy.
func (p Policy) Encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings, a duration and a string map always encode
	}
	return b
}

// ParsePolicy reads a stored policy; nil or empty is no policy (ok false).
func ParsePolicy(stored []byte) (p Policy, ok bool, err error) {
	if len(stored) == 0 {
		return Policy{}, false, nil
	}
	if err := json.Unmarshal(stored, &p); err != nil {
		return Policy{}, false, fmt.Errorf("stored validation policy: %w", err)
	}
	return p, true, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
