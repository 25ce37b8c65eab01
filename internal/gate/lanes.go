package gate

import "github.com/ag-coord/ag/internal/repo"

// RootLane is the lane of a change not within one lane: it is validated on the whole tree, with
// the policy's own command, and the changes of every lane wait for it and it for them.
const RootLane = ""

// LaneOf answers the lane whose paths cover every one of paths, or RootLane.
func LaneOf(lanes []Lane, paths []string) string {
	if len(paths) == 0 {
		return RootLane
	}
	for _, l := range lanes {
		if coversAll(l.Prefixes, paths) {
			return l.Name
		}
	}
	return RootLane
}

func coversAll(prefixes, paths []string) bool {
	for _, p := range paths {
		covered := false
		for _, pre := range prefixes {
			if repo.Covers(pre, p) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

// LaneHidden answers the paths a lane's candidates leave out: every other lane's. What is left
// is the lane's own files and those of no lane, which only changes of the root lane edit.
func LaneHidden(lanes []Lane, name string) []string {
	var hidden []string
	for _, l := range lanes {
		if l.Name != name {
			hidden = append(hidden, l.Prefixes...)
		}
	}
	return hidden
}

// LanePaths answers a lane's own paths.
func LanePaths(lanes []Lane, name string) []string {
	for _, l := range lanes {
		if l.Name == name {
			return l.Prefixes
		}
	}
	return nil
}
