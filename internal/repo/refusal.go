package repo

import (
	"fmt"
	"time"
)

// LeaseRefusal says why a path may not be changed by a holder, in one line a person or an agent
// can act on, with the command that would let it through. The server words a refused push with
// it and the working tree's git hooks word a refused commit or push with it, so that both say
// the same thing: other is the holder of a current lease on the path ("" when none), until its
// expiry, and stale the token the holder sent that a later grant superseded (0 when none).
func LeaseRefusal(path, other string, until time.Time, stale uint64) string {
	switch {
	case other != "":
		return fmt.Sprintf("%s: leased by %s until %s; `ag lease acquire %s --wait 5m`",
			path, other, until.UTC().Format("15:04:05Z"), path)
	case stale != 0:
		return fmt.Sprintf("%s: your lease token %d is stale, a later grant took the path; `ag lease acquire %s`",
			path, stale, path)
	}
	return fmt.Sprintf("%s: not under a current lease of yours; `ag lease acquire %s`", path, path)
}
