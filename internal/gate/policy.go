package gate

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/repo"
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
	// Lanes are the parts of the repository validated apart (ADR-0024); the command above
	// validates every change that is not within one lane, on the whole tree.
	Lanes []Lane `json:"lanes,omitempty"`
	// Network is the network of the command: NetworkNone ("" when stored) or NetworkEgress.
	Network string `json:"network,omitempty"`
	// Isolation is the evidence a pass must carry: IsolationSandbox ("" when stored) or
	// IsolationAny.
	Isolation string `json:"isolation,omitempty"`
	// Limits bound each run below its worker's own limits; nil: the worker's.
	Limits *Limits `json:"limits,omitempty"`
	// Protect are the paths validated with the mainline's copy, whose changes land only
	// approved (ADR-0031), besides the commands' entry files (Protected).
	Protect []string `json:"protect,omitempty"`
	// Preset names the recipe (PresetGo) whose prepare phase fills the worker's caches before
	// each run; "" for none.
	Preset string `json:"preset,omitempty"`
}

// Limits are what a policy lets one run use, each 0 for the worker's own. They travel in the
// validate payload under the same names, which the worker reads.
type Limits struct {
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	Pids        uint32 `json:"pids,omitempty"`
	DiskBytes   uint64 `json:"disk_bytes,omitempty"`
}

// The least a policy may ask: a shell and bubblewrap need that much to start.
const (
	MinMemoryBytes = 16 << 20
	MinPids        = 8
	MinDiskBytes   = 16 << 20
	// MaxLimitBytes keeps a limit within what every worker reads as a signed 64-bit size.
	MaxLimitBytes = 1 << 50
)

// WithLimits answers p with the limits of its runs, checked; all zero is none.
func (p Policy) WithLimits(l Limits) (Policy, error) {
	switch {
	case l.MemoryBytes != 0 && l.MemoryBytes < MinMemoryBytes:
		return Policy{}, &PolicyError{"limits.memory_bytes", fmt.Sprintf("%d is less than %d (16 MiB)", l.MemoryBytes, MinMemoryBytes)}
	case l.Pids != 0 && l.Pids < MinPids:
		return Policy{}, &PolicyError{"limits.pids", fmt.Sprintf("%d is less than %d", l.Pids, MinPids)}
	case l.DiskBytes != 0 && l.DiskBytes < MinDiskBytes:
		return Policy{}, &PolicyError{"limits.disk_bytes", fmt.Sprintf("%d is less than %d (16 MiB)", l.DiskBytes, MinDiskBytes)}
	case l.MemoryBytes > MaxLimitBytes || l.DiskBytes > MaxLimitBytes:
		return Policy{}, &PolicyError{"limits", fmt.Sprintf("memory_bytes and disk_bytes are at most %d (1 PiB)", MaxLimitBytes)}
	}
	p.Limits = nil
	if l != (Limits{}) {
		p.Limits = &l
	}
	return p, nil
}

// The evidence a policy may ask of a pass.
const (
	// IsolationSandbox: the run was in the worker's sandbox, with no more network than the
	// policy asks.
	IsolationSandbox = "sandbox"
	// IsolationAny: any run a registered worker attests, even without a sandbox.
	IsolationAny = "none"
)

// WithIsolation answers p with the evidence its passes must carry, checked; "" is
// IsolationSandbox.
func (p Policy) WithIsolation(isolation string) (Policy, error) {
	switch isolation {
	case "", IsolationSandbox:
		p.Isolation = ""
	case IsolationAny:
		p.Isolation = IsolationAny
	default:
		return Policy{}, &PolicyError{"isolation", fmt.Sprintf("%q is none of %q (the default) and %q", truncate(isolation, 40), IsolationSandbox, IsolationAny)}
	}
	return p, nil
}

// The networks a policy may ask of its validations. A worker started with
// --sandbox-network shared gives them its own network whatever the policy asks, and says so
// in the attestation.
const (
	NetworkNone   = "none"   // a loopback of its own and nothing else
	NetworkEgress = "egress" // through the worker's egress proxy, to the hosts its operator allows
)

// WithNetwork answers p with its validations' network, checked; "" is NetworkNone.
func (p Policy) WithNetwork(network string) (Policy, error) {
	switch network {
	case "", NetworkNone:
		p.Network = ""
	case NetworkEgress:
		p.Network = NetworkEgress
	default:
		return Policy{}, &PolicyError{"network", fmt.Sprintf("%q is none of %q (the default) and %q", truncate(network, 40), NetworkNone, NetworkEgress)}
	}
	return p, nil
}

// Lane is a part of a repository validated on its own: a change all of whose paths are under
// its prefixes is validated with its command, on the candidate tree without the other lanes'
// files, and does not wait for the changes of other lanes.
type Lane struct {
	Name     string            `json:"name"`
	Prefixes []string          `json:"prefixes"`
	Command  []string          `json:"command"`
	Timeout  Duration          `json:"timeout"`
	Env      map[string]string `json:"env,omitempty"`
}

// Limits of a policy's lanes.
const (
	MaxLanes        = 32
	maxLanePrefixes = 64
)

var laneName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)

// NewLane checks a lane's parts as NewPolicy checks a policy's, and its name and prefixes
// (lease paths: "dir/" for a directory, or a file).
func NewLane(name string, prefixes []string, command []string, timeout time.Duration, env map[string]string) (Lane, error) {
	if !laneName.MatchString(name) {
		return Lane{}, &PolicyError{"name", fmt.Sprintf("%q is not a lane name (1 to 32 of a-z, 0-9, '.', '_', '-', starting with a letter or digit)", truncate(name, 80))}
	}
	if len(prefixes) == 0 {
		return Lane{}, &PolicyError{"prefixes", "are required: the directories (\"web/\") and files the lane validates"}
	}
	if len(prefixes) > maxLanePrefixes {
		return Lane{}, &PolicyError{"prefixes", fmt.Sprintf("has %d paths, more than %d", len(prefixes), maxLanePrefixes)}
	}
	for i, pre := range prefixes {
		if err := repo.ValidatePath(pre, true); err != nil {
			return Lane{}, &PolicyError{fmt.Sprintf("prefixes[%d]", i), fmt.Sprintf("%q %v", truncate(pre, 80), err)}
		}
		for _, other := range prefixes[:i] {
			if repo.Overlap(pre, other) {
				return Lane{}, &PolicyError{fmt.Sprintf("prefixes[%d]", i), fmt.Sprintf("%q overlaps %q", pre, other)}
			}
		}
	}
	p, err := NewPolicy(command, timeout, env)
	if err != nil {
		return Lane{}, err
	}
	return Lane{Name: name, Prefixes: slices.Clone(prefixes), Command: p.Command, Timeout: p.Timeout, Env: p.Env}, nil
}

// WithLanes answers p with lanes, checked: unique names, and no path of one lane overlapping a
// path of another, so that what a lane validates cannot be changed by another lane's change.
func (p Policy) WithLanes(lanes []Lane) (Policy, error) {
	if len(lanes) > MaxLanes {
		return Policy{}, &PolicyError{"lanes", fmt.Sprintf("has %d lanes, more than %d", len(lanes), MaxLanes)}
	}
	for i, l := range lanes {
		for _, other := range lanes[:i] {
			if l.Name == other.Name {
				return Policy{}, &PolicyError{fmt.Sprintf("lanes[%d].name", i), fmt.Sprintf("%q names two lanes", l.Name)}
			}
			for _, pre := range l.Prefixes {
				for _, o := range other.Prefixes {
					if pathsMeet(pre, o) {
						return Policy{}, &PolicyError{fmt.Sprintf("lanes[%d].prefixes", i),
							fmt.Sprintf("%q of lane %s overlaps %q of lane %s: a path belongs to one lane at most", pre, l.Name, o, other.Name)}
					}
				}
			}
		}
	}
	if len(lanes) == 0 {
		lanes = nil
	}
	p.Lanes = lanes
	return p, nil
}

// pathsMeet reports whether two lease paths name the same place or one lies within the other,
// as a file or a directory: "a" and "a/" meet (a file a and a directory a cannot both be), and so
// do "cfg/app" and "cfg/app/x". Two lanes whose paths meet could each pass on its own view and
// then never land together.
func pathsMeet(p, q string) bool {
	p, q = strings.TrimSuffix(p, "/"), strings.TrimSuffix(q, "/")
	return p == q || strings.HasPrefix(q, p+"/") || strings.HasPrefix(p, q+"/")
}

// Lane answers the lane called name, or the policy's own command as a lane for "" (the root
// lane: the whole tree). ok is false for a lane the policy does not have.
func (p Policy) Lane(name string) (l Lane, ok bool) {
	if name == "" {
		return Lane{Command: p.Command, Timeout: p.Timeout, Env: p.Env}, true
	}
	for _, l := range p.Lanes {
		if l.Name == name {
			return l, true
		}
	}
	return Lane{}, false
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
