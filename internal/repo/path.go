// Package repo is the content model of a repository, independent of any database: clean paths
// and the overlap rule of leases, trees (sorted path → blob digest) with their canonical
// encoding and digest, and the path-level rebase that Integrate applies.
package repo

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of a path: what Linux, macOS and Windows file systems can all hold.
const (
	MaxPathBytes    = 4096
	MaxSegmentBytes = 255
)

// reservedNames are the directory names no repository may hold at any depth: a checkout keeps
// its own state in .ag, and git its configuration (hooks, fsmonitor, alternates) in .git, so
// a file there written by `ag checkout` would be a command or a server address of the
// author's choosing on the next `ag status` or `git status` of whoever checked it out.
var reservedNames = []string{".git", ".ag"}

// ValidatePath checks that p is a clean relative path: '/'-separated, no leading '/', no empty,
// "." or ".." segment, valid UTF-8 without control characters, at most MaxPathBytes, no segment
// longer than MaxSegmentBytes and none that is reserved (see ReservedSegment). A trailing '/'
// names a directory and is allowed only when dirOK (lease paths may be directories, edits may
// not).
//
// Paths are printed to other people's terminals (lease lists, a change's paths, a sync's
// conflicts), which act on control characters: ESC or U+009B starts a sequence that clears the
// screen or writes the clipboard, BEL rings, a newline or carriage return forges a line of
// output. So no path holds a C0 control character (U+0000-U+001F, tab and newline among them),
// DEL (U+007F) or a C1 control character (U+0080-U+009F).
func ValidatePath(p string, dirOK bool) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("is %d bytes, more than %d", len(p), MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("contains NUL")
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	}
	if r, ok := controlCharacter(p); ok {
		return fmt.Errorf("contains the control character %U, which a terminal would act on when the path is printed", r)
	}
	switch {
	case strings.HasPrefix(p, "/"):
		return errors.New("starts with '/': paths are relative to the repository's root")
	case strings.Contains(p, "\\"):
		return errors.New("contains '\\': separate directories with '/'")
	}
	body := p
	if strings.HasSuffix(p, "/") {
		if !dirOK {
			return errors.New("ends with '/': name a file")
		}
		body = strings.TrimSuffix(p, "/")
	}
	for rest := body; ; {
		seg, tail, more := strings.Cut(rest, "/")
		rest = tail
		switch seg {
		case "":
			return errors.New("has an empty segment ('//')")
		case ".", "..":
			return fmt.Errorf("has a %q segment: paths must be clean", seg)
		}
		if len(seg) > MaxSegmentBytes {
			return fmt.Errorf("has a segment of %d bytes, more than %d: file systems cannot hold it", len(seg), MaxSegmentBytes)
		}
		if name, ok := ReservedSegment(seg); ok {
			return fmt.Errorf("has a segment %q, which names %s: no repository may hold a %s directory", seg, name, name)
		}
		if !more {
			return nil
		}
	}
}

// ReservedSegment reports whether seg names .git or .ag on some file system a checkout may
// live on, and which. The comparison is the one git makes for its own directory (verify_path,
// is_ntfs_dotgit, is_hfs_dotgit): case-insensitive (macOS, Windows), ignoring the code points
// HFS+ ignores, the trailing dots and spaces NTFS drops and an NTFS stream (":..."), and NTFS's
// short names "git~1" and "ag~1" too.
func ReservedSegment(seg string) (string, bool) {
	// Every reserved spelling holds an ASCII '.' or '~' (the code points HFS+ ignores are
	// left out, not mapped to '.'): most names are cleared without folding.
	if seg == "" || seg[0] < utf8.RuneSelf && !strings.ContainsRune(".gGaA", rune(seg[0])) {
		// Folding changes neither an ASCII first letter nor what precedes it: a name that
		// begins with none of those of the reserved names' is none of them.
		return "", false
	}
	if !strings.ContainsAny(seg, ".~") {
		return "", false
	}
	// An ASCII name holds none of the code points HFS+ ignores, so it folds without a copy:
	// a checkout's scan asks this of every file name, and most hold a '.'.
	if ascii(seg) {
		folded, _, _ := strings.Cut(seg, ":")
		folded = strings.TrimRight(folded, ". ")
		for _, name := range reservedNames {
			short, isShort := strings.CutSuffix(folded, "~1")
			if strings.EqualFold(folded, name) || (isShort && strings.EqualFold(short, name[1:])) {
				return name, true
			}
		}
		return "", false
	}
	folded := strings.ToLower(strings.Map(func(r rune) rune {
		if hfsIgnored(r) {
			return -1
		}
		return r
	}, seg))
	folded, _, _ = strings.Cut(folded, ":")
	folded = strings.TrimRight(folded, ". ")
	for _, name := range reservedNames {
		if folded == name || folded == strings.TrimPrefix(name, ".")+"~1" {
			return name, true
		}
	}
	return "", false
}

// controlCharacter answers the first C0, DEL or C1 control character of p, valid UTF-8. It
// reads bytes, not runes: every file name of a checkout's scan is asked, and a C1 character is
// the two bytes 0xC2 0x80-0x9F.
func controlCharacter(p string) (rune, bool) {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c < 0x20 || c == 0x7f:
			return rune(c), true
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			return rune(p[i+1]), true
		}
	}
	return 0, false
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// hfsIgnored reports whether HFS+ leaves r out when it compares names (git's is_hfs_dot_git).
func hfsIgnored(r rune) bool {
	switch {
	case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
		return true
	}
	return false
}

// IsDir reports whether a lease path names a directory.
func IsDir(p string) bool { return strings.HasSuffix(p, "/") }

// Overlap reports whether two lease paths overlap: they are equal, or one is a directory
// ("a/") that contains the other. "src/a" and "src/ab" do not overlap; "src/" and "src/ab" do.
func Overlap(p, q string) bool {
	if p == q {
		return true
	}
	if IsDir(p) && strings.HasPrefix(q, p) {
		return true
	}
	return IsDir(q) && strings.HasPrefix(p, q)
}

// Covers reports whether lease path l covers the file path f: equal, or l is a directory
// containing f.
func Covers(l, f string) bool {
	return l == f || (IsDir(l) && strings.HasPrefix(f, l))
}

// Ancestors answers the directory paths that contain p, outermost first: "a/b/c" → "a/",
// "a/b/". A store finds the leases overlapping p among these, p itself, and (when p is a
// directory) the paths that start with p.
func Ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p)-1; i++ {
		if p[i] == '/' {
			out = append(out, p[:i+1])
		}
	}
	return out
}
