package gate

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/ag-coord/ag/internal/repo"
)

// MaxProtected bounds the paths a policy protects.
const MaxProtected = 64

// WithProtect answers p with its protected paths, checked: lease paths ("ci/" for a directory,
// or a file), at most MaxProtected, kept sorted and unique. A change that touches one is
// validated with the mainline's copy and lands only approved (ADR-0031).
func (p Policy) WithProtect(paths []string) (Policy, error) {
	if len(paths) > MaxProtected {
		return Policy{}, &PolicyError{"protect", fmt.Sprintf("has %d paths, more than %d", len(paths), MaxProtected)}
	}
	out := make([]string, 0, len(paths))
	for i, pp := range paths {
		pp = strings.TrimPrefix(pp, "./")
		if err := repo.ValidatePath(pp, true); err != nil {
			return Policy{}, &PolicyError{fmt.Sprintf("protect[%d]", i), fmt.Sprintf("%q %v", truncate(pp, 80), err)}
		}
		out = append(out, pp)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		out = nil
	}
	p.Protect = out
	return p, nil
}

// interpreters are the programs whose first operand is the script they run (that script is
// the command's entry file), each with the options after which it runs no file: the program is
// the argument itself, or a module.
var interpreters = map[string][]string{
	"sh": {"-c"}, "bash": {"-c"}, "dash": {"-c"}, "zsh": {"-c"}, "ksh": {"-c"},
	"python": {"-c", "-m"}, "python3": {"-c", "-m"},
	"node": {"-e", "--eval", "-p", "--print"}, "bun": {"-e", "--eval", "-p", "--print"}, "deno": {"eval"},
	"perl": {"-e", "-E"}, "ruby": {"-e"}, "php": {"-r"}, "lua": {"-e"}, "tclsh": {},
}

// EntryFiles answers the files of the repository that a command runs as its own: command[0]
// when it is a path ("./test.sh", "scripts/ci"), the script an interpreter is given
// ("sh ci/test.sh", "python3 -u check.py"), and make's make files. They are protected without
// being listed: otherwise any change could rewrite the check that judges it.
func EntryFiles(command []string) []string {
	if len(command) == 0 {
		return nil
	}
	var out []string
	add := func(p string) {
		p = path.Clean(strings.TrimPrefix(p, "./"))
		if repo.ValidatePath(p, false) == nil {
			out = append(out, p)
		}
	}
	prog := command[0]
	if strings.Contains(prog, "/") && !path.IsAbs(prog) {
		add(prog)
		return out
	}
	base := path.Base(prog)
	switch {
	case base == "make" || base == "gmake":
		file := ""
		for i := 1; i < len(command); i++ {
			a := command[i]
			if (a == "-f" || a == "--file" || a == "--makefile") && i+1 < len(command) {
				file = command[i+1]
				break
			}
			if f, ok := strings.CutPrefix(a, "--file="); ok {
				file = f
				break
			}
		}
		if file != "" {
			add(file)
		} else {
			add("GNUmakefile")
			add("makefile")
			add("Makefile")
		}
	default:
		if strings.HasPrefix(base, "python3.") {
			base = "python3"
		}
		inline, ok := interpreters[base]
		if !ok {
			return out
		}
		for _, a := range command[1:] {
			if slices.Contains(inline, a) {
				return out
			}
			if strings.HasPrefix(a, "-") {
				continue
			}
			add(a)
			return out
		}
	}
	return out
}

// Protected answers every path the policy protects: its own, and the entry files of its
// command and of its lanes' commands, sorted and unique.
func (p Policy) Protected() []string {
	out := slices.Clone(p.Protect)
	out = append(out, EntryFiles(p.Command)...)
	for _, l := range p.Lanes {
		out = append(out, EntryFiles(l.Command)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ProtectedTouched answers the protected paths among protected that the changed paths touch: a
// changed path a protected one covers, or a protected path under a changed directory.
func ProtectedTouched(protected, changed []string) []string {
	var out []string
	for _, pp := range protected {
		for _, c := range changed {
			if repo.Overlap(pp, c) || touchesAncestor(c, pp) {
				out = append(out, pp)
				break
			}
		}
	}
	return out
}

// touchesAncestor reports whether changed names a directory of protected as a file: a change
// that writes "ci" (a file or a link) where the protected "ci/test.sh" lies replaces it.
func touchesAncestor(changed, protected string) bool {
	return strings.HasPrefix(protected, strings.TrimSuffix(changed, "/")+"/")
}

// protectedFor answers the protected paths a lane's validation takes from the mainline: for
// the root lane, all of them; for a lane, those that neither lie in nor hold a path its view
// hides (the mainline's copy would bring another lane's files into its view).
func protectedFor(protected, hidden []string) []string {
	if len(hidden) == 0 {
		return protected
	}
	var out []string
	for _, pp := range protected {
		if !slices.ContainsFunc(hidden, func(h string) bool { return pathsMeet(pp, h) }) {
			out = append(out, pp)
		}
	}
	return out
}
