package checkout

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"maps"
	"os"
	"slices"
	"time"
)

// A large checkout's index is megabytes, and a new base differs from the last one by the few
// paths a change brought: written whole, it would be most of what an integrate costs. So, as
// git's split index does, a new base is written as an overlay: the entries that differ from a
// whole index file (the shared one), with a checksum of that file, which checkout.json names
// in place of a whole index. Once the overlay would hold more than a fifth of the entries, the
// whole index is written again.
//
// Each overlay has a shared file of its own name: a hard link to the whole index it was
// computed against, made when the overlay is written under a new name. An ag that moves the
// checkout removes the index it replaced and that index's link; a scan rewrites an index in
// place (a new file renamed over the name) as what it was read as, an overlay over the same
// link or a whole index. So a file an overlay names is never removed while checkout.json names
// the overlay, nor rewritten under it: a rewrite of the whole index it was linked from makes a
// new file, and the link keeps the old one.
const overlayMagic = "ag-index\x00\x05"

// overlayShare: an overlay holds at most 1/overlayShare of the index's entries.
const overlayShare = 5

// overlayEntries answers the entries of the overlay of x over x.shared: those of x.changed,
// or a removed mark for a path x no longer holds.
func (x *index) overlayEntries() []indexEntry {
	paths := slices.Sorted(maps.Keys(x.changed))
	out := make([]indexEntry, 0, len(paths))
	for _, p := range paths {
		if i, ok := x.find(p); ok {
			out = append(out, x.entries[i])
		} else {
			out = append(out, indexEntry{path: p, removed: true})
		}
	}
	return out
}

// applyTo makes x, an overlay as read, the index it stands for over shared, the entries of
// its shared index (with room for what the overlay adds): shared's entries, those of the
// overlay in their place. shared is taken, not copied.
func (x *index) applyTo(shared []indexEntry) error {
	over := x.entries
	x.changed = make(map[string]bool, len(over))
	var added []indexEntry
	gone := false
	for i := range over {
		e := &over[i]
		x.changed[e.path] = true
		j, ok := findEntry(shared, e.path)
		switch {
		case ok:
			shared[j] = *e
			gone = gone || e.removed
		case e.removed:
			// A removal of what the shared index does not hold: no overlay ag wrote.
			return errIndexDamaged
		default:
			added = append(added, *e)
		}
	}
	if gone {
		shared = slices.DeleteFunc(shared, func(e indexEntry) bool { return e.removed })
	}
	x.entries = mergeSorted(shared, added)
	return nil
}

// mergeSorted answers into the sorted entries the sorted added, none of whose paths it holds,
// in place when into has the room.
func mergeSorted(into, added []indexEntry) []indexEntry {
	if len(added) == 0 {
		return into
	}
	i, k := len(into)-1, len(into)+len(added)-1
	into = slices.Grow(into, len(added))[:k+1]
	for j := len(added) - 1; j >= 0; k-- {
		if i >= 0 && into[i].path > added[j].path {
			into[k] = into[i]
			i--
		} else {
			into[k] = added[j]
			j--
		}
	}
	return into
}

// noteChanged records that the entries of paths differ from the shared index's.
func (x *index) noteChanged(paths ...string) {
	if x.changed == nil {
		x.changed = make(map[string]bool, len(paths))
	}
	for _, p := range paths {
		x.changed[p] = true
	}
}

// saveIndex writes x as the index file name under .ag, atomically: rewritten in place as what
// it was read as (an overlay over its link, or whole); under a new name as an overlay over a
// new link to its shared file when it differs from that file by few entries, else whole.
func saveIndex(root *os.Root, name string, x *index) error {
	switch {
	case name == x.linkOf:
		return writeOverlay(root, name, x)
	case x.shared == "" || name == x.shared || len(x.changed)*overlayShare > len(x.entries):
		return writeWhole(root, name, x)
	}
	link := indexPrefix + rand.Text()
	if err := root.Link(StateDir+"/"+x.shared, StateDir+"/"+link); err != nil {
		// A file system without hard links, or the shared file gone with another ag's move.
		return writeWhole(root, name, x)
	}
	// The link is the old file's, mtime and all: made new, it must not pass for a crash's
	// leftover to another ag's removeStaleIndexes before checkout.json names its overlay. A
	// later mtime changes nothing a reader takes from the file: the stamp is the earlier of
	// the two.
	now := time.Now()
	if err := root.Chtimes(StateDir+"/"+link, now, now); err != nil {
		_ = root.Remove(StateDir + "/" + link)
		return writeWhole(root, name, x)
	}
	shared, linkOf := x.shared, x.linkOf
	x.shared, x.linkOf = link, name
	if err := writeOverlay(root, name, x); err != nil {
		x.shared, x.linkOf = shared, linkOf
		_ = root.Remove(StateDir + "/" + link)
		return err
	}
	return nil
}

// writeWhole writes x whole as the index file name; x is then what that file holds.
func writeWhole(root *os.Root, name string, x *index) error {
	var crc uint32
	err := writeFileWith(root, StateDir+"/"+name, 0o644, true, func(w io.Writer) (err error) {
		crc, err = writeEntries(w, indexMagic, x.stamp, x.watch, nil, x.entries)
		return err
	})
	if err == nil {
		x.shared, x.linkOf, x.changed, x.sharedCRC = name, "", nil, crc
	}
	return err
}

// writeOverlay writes x as the overlay name over x.shared.
func writeOverlay(root *os.Root, name string, x *index) error {
	extra := append([]byte{byte(len(x.shared))}, x.shared...)
	extra = binary.LittleEndian.AppendUint32(extra, x.sharedCRC)
	entries := x.overlayEntries()
	return writeFileWith(root, StateDir+"/"+name, 0o644, true, func(w io.Writer) error {
		_, err := writeEntries(w, overlayMagic, x.stamp, x.watch, extra, entries)
		return err
	})
}

// ownLink answers the link the index file name has of its own, when it is an overlay x was
// read from or written as: it goes with name.
func (x *index) ownLink(name string) string {
	if name != "" && x.linkOf == name {
		return x.shared
	}
	return ""
}
