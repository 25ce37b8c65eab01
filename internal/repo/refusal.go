package repo

import (
	"fmt"
	"time"
)

// LeaseRefusal says why a path may not be changed by a holder, in one line a person or an agent
// can act on, with the command that would let it through. The server words a refused push with
// it and the working tree's git hooks word a refused commit or push with it, so that both say
// the same thing: other is the holder of a current lease on the path ("" when none), until its
// expiry.
func LeaseRefusal(path, other string, until time.Time) string {
	if other != "" {
		return fmt.Sprintf("%s: leased by %s until %s; `ag lease acquire %s --wait 5m`",
			path, other, until.UTC().Format("15:04:05Z"), path)
	}
	return fmt.Sprintf("%s: not under a current lease of yours; `ag lease acquire %s`", path, path)
}
