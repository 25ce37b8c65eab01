package repoview

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/size"
)

// PolicyFlags are the values of the policy flags of `ag repo create` and `ag repo
// set-validation` as given; the command itself follows the repository name, after --, and is
// passed to Policy apart.
type PolicyFlags struct {
	Timeout   time.Duration
	Env       []string // NAME=VALUE
	Depth     uint32
	Batch     uint32
	Lanes     []string // NAME=PREFIX[,PREFIX...]:COMMAND ARGS...
	Network   string
	Isolation string
	MaxMemory string // a size, as internal/size parses it
	MaxPids   uint32
	MaxDisk   string // a size, as internal/size parses it
	Protect   []string
	Preset    string
}

// Given reports whether a policy flag was given: without a command they would set nothing,
// and a command that says to remove the policy takes none.
func (f *PolicyFlags) Given() bool {
	return f.Timeout != 0 || len(f.Env) > 0 || f.Depth != 0 || f.Batch != 0 || len(f.Lanes) > 0 || f.Network != "" || f.Isolation != "" ||
		f.MaxMemory != "" || f.MaxPids != 0 || f.MaxDisk != "" || len(f.Protect) > 0 || f.Preset != ""
}

// Policy answers the policy for command, nil when command is empty and no flag was given. It
// checks only what the flags' own syntax says (sizes, NAME=VALUE, lanes), leaving what the
// policy means to the server, which checks it for every client alike.
func (f *PolicyFlags) Policy(command []string) (*agwpv1.Validation, error) {
	if len(command) == 0 && f.Preset == "" {
		if f.Given() {
			return nil, errors.New("--timeout, --env, --depth, --batch, --network, --isolation, --max-*, --protect and --lane belong to a validation command: name it after --, e.g. `-- go test ./...`")
		}
		return nil, nil
	}
	v := &agwpv1.Validation{Command: command, Depth: f.Depth, Batch: f.Batch, Network: f.Network, Isolation: f.Isolation, Protect: f.Protect, Preset: f.Preset}
	if f.Timeout != 0 {
		v.Timeout = durationpb.New(f.Timeout)
	}
	if f.MaxMemory != "" || f.MaxPids != 0 || f.MaxDisk != "" {
		v.Limits = &agwpv1.ValidationLimits{Pids: f.MaxPids}
		for _, s := range []struct {
			flag, value string
			to          *uint64
		}{{"--max-memory", f.MaxMemory, &v.Limits.MemoryBytes}, {"--max-disk", f.MaxDisk, &v.Limits.DiskBytes}} {
			if s.value == "" {
				continue
			}
			n, err := size.Parse(s.value)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.flag, err)
			}
			*s.to = uint64(n)
		}
	}
	for _, kv := range f.Env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--env %q: use NAME=VALUE", kv)
		}
		if v.Env == nil {
			v.Env = map[string]string{}
		}
		v.Env[name] = value
	}
	for _, l := range f.Lanes {
		lane, err := ParseLane(l)
		if err != nil {
			return nil, fmt.Errorf("--lane %q: %w", l, err)
		}
		v.Lanes = append(v.Lanes, lane)
	}
	return v, nil
}

// ParseLane reads a --lane value, NAME=PREFIX[,PREFIX...]:COMMAND ARGS..., leaving the server
// to check the name, the paths and the command's arguments: one flag holds a whole lane, so its
// parts need separators a shell passes unquoted.
func ParseLane(s string) (*agwpv1.ValidationLane, error) {
	const use = "use NAME=PREFIX[,PREFIX...]:COMMAND ARGS..., e.g. web=web/,docs/web/:npm test"
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return nil, errors.New("no lane name before '=': " + use)
	}
	prefixes, command, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, errors.New("no ':' between the prefixes and the command: " + use)
	}
	lane := &agwpv1.ValidationLane{Name: name, Command: strings.Fields(command)}
	for _, p := range strings.Split(prefixes, ",") {
		if p == "" {
			return nil, errors.New("an empty prefix: name the lane's directories (\"web/\") and files, separated by ','")
		}
		lane.Prefixes = append(lane.Prefixes, p)
	}
	if len(lane.Command) == 0 {
		return nil, errors.New("no command after ':': " + use)
	}
	return lane, nil
}

// DescribePolicy says a policy in one line, in the terms of the flags that set it, so that what
// `ag repo create`, `set-validation`, `show` and `list` print reads as what was asked for;
// what is the server's default is left unsaid.
func DescribePolicy(v *agwpv1.Validation) string {
	s := "`" + strings.Join(v.GetCommand(), " ") + "`"
	if v.GetTimeout() != nil {
		s += " (timeout " + v.GetTimeout().AsDuration().String() + ")"
	}
	if d := v.GetDepth(); d > 0 {
		s += fmt.Sprintf(", %d at once", d)
	}
	if b := v.GetBatch(); b > 1 {
		s += fmt.Sprintf(", in batches of %d", b)
	}
	if n := v.GetNetwork(); n != "" && n != "none" {
		s += ", network " + n
	}
	if i := v.GetIsolation(); i == "none" {
		s += ", any run accepted (no sandbox required)"
	}
	if l := v.GetLimits(); l != nil {
		if m := l.GetMemoryBytes(); m > 0 {
			s += ", memory " + size.Format(int64(m))
		}
		if p := l.GetPids(); p > 0 {
			s += fmt.Sprintf(", %d processes", p)
		}
		if d := l.GetDiskBytes(); d > 0 {
			s += ", disk " + size.Format(int64(d))
		}
	}
	if p := v.GetPreset(); p != "" {
		s += ", preset " + p
	}
	if p := v.GetProtect(); len(p) > 0 {
		s += ", protecting " + strings.Join(p, ", ")
	}
	for i, l := range v.GetLanes() {
		if i == 0 {
			s += ", lanes: "
		} else {
			s += "; "
		}
		s += l.GetName() + " (" + strings.Join(l.GetPrefixes(), ", ") + ") `" + strings.Join(l.GetCommand(), " ") + "`"
		if t := l.GetTimeout(); t != nil && t.AsDuration() != v.GetTimeout().AsDuration() {
			s += " (timeout " + t.AsDuration().String() + ")"
		}
	}
	return s
}
