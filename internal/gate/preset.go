package gate

import (
	"fmt"
	"slices"

	"github.com/ag-coord/ag/agwp"
)

// A preset is a validation recipe a worker knows how to make fast without trusting the code it
// validates (docs/validation.md, "Presets"): before the policy's command, a prepare phase that
// runs none of the candidate's code fills the worker's caches for the repository, and the command
// then sees those caches read-only.
const (
	// PresetGo: the prepare phase downloads the modules (through the worker's egress proxy) and
	// compiles and vets the packages and their tests (`go test -c`, running nothing) into the
	// repository's Go build cache; the command's go reads that cache and keeps what it builds
	// in the run's own directory (GOCACHEPROG).
	PresetGo = agwp.PresetGo
	// PresetNode: the prepare phase installs the packages package-lock.json names, running
	// none of their scripts (`npm ci --ignore-scripts`), into a node_modules of the worker's
	// that the command sees read-only in its checkout.
	PresetNode = agwp.PresetNode
	// PresetPython: the prepare phase installs the wheels the tree's requirements files name
	// (binary wheels only, so no package's build code runs; never the project itself) into a
	// directory the command sees read-only on its PYTHONPATH.
	PresetPython = agwp.PresetPython
)

// presetCommands are the commands of the presets, when the policy names none.
var presetCommands = map[string][]string{
	PresetGo:     {"go", "test", "./..."},
	PresetNode:   {"npm", "test"},
	PresetPython: {"python3", "-m", "pytest"},
}

// PresetCommand answers a preset's command, and whether the preset is known.
func PresetCommand(name string) ([]string, bool) {
	c, ok := presetCommands[name]
	return slices.Clone(c), ok
}

// WithPreset answers p with its preset, checked; "" is none.
func (p Policy) WithPreset(name string) (Policy, error) {
	if _, ok := presetCommands[name]; name != "" && !ok {
		return Policy{}, &PolicyError{"preset", fmt.Sprintf("%q is not a preset this server knows (%q, %q or %q)", truncate(name, 40), PresetGo, PresetNode, PresetPython)}
	}
	p.Preset = name
	return p, nil
}
