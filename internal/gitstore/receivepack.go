package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
)

// The receive-pack half of git's smart HTTP protocol (v0, the only one git pushes with): the
// words on the wire, and nothing of what a push means, which the server decides.

// receiveCapabilities are what ag's receive-pack offers: a status report per ref (which git
// prints, and which makes a refused push exit non-zero), progress and that report through
// side-band, push options (-o ag.holder=...), deltas against an offset, and quiet.
const receiveCapabilities = "report-status side-band-64k push-options ofs-delta quiet agent=ag"

// maxReceiveCommands bounds the ref updates of one push: ag takes one, and says so for more.
const maxReceiveCommands = 64

// maxPushOptions bounds the push options of one push, and maxPushOptionBytes each.
const (
	maxPushOptions     = 32
	maxPushOptionBytes = 1024
)

// AdvertiseReceiveRefs writes the answer to `GET info/refs?service=git-receive-pack`: main as
// refs/heads/main (none for a repository without a commit), then haves as ".have" lines,
// objects the server holds that git need not send again.
func AdvertiseReceiveRefs(w io.Writer, main plumbing.Hash, haves []plumbing.Hash) error {
	e := pktline.NewEncoder(w)
	if err := e.EncodeString("# service=git-receive-pack\n"); err != nil {
		return err
	}
	if err := e.Flush(); err != nil {
		return err
	}
	first := main.String() + " " + string(MainBranch)
	if main.IsZero() {
		first = plumbing.ZeroHash.String() + " capabilities^{}"
	}
	if err := e.EncodeString(first + "\x00" + receiveCapabilities + "\n"); err != nil {
		return err
	}
	for _, h := range haves {
		if err := e.EncodeString(h.String() + " .have\n"); err != nil {
			return err
		}
	}
	return e.Flush()
}

// RefUpdate is one command of a push: move Name from Old to New (zero Old: create; zero New:
// delete).
type RefUpdate struct {
	Old, New plumbing.Hash
	Name     string
}

// ReceiveRequest is a push's commands, the capabilities git asked for, and its push options;
// the pack follows it in the body.
type ReceiveRequest struct {
	Updates      []RefUpdate
	Capabilities []string
	Options      []string // as git sent them, "ag.holder=a1"
	// Shallow is what a push from a shallow clone says first: the commits its history stops at
	// (its .git/shallow). The server decides whether it takes such a push.
	Shallow []plumbing.Hash
}

// Asked reports whether git asked for the capability name.
func (r *ReceiveRequest) Asked(name string) bool {
	for _, c := range r.Capabilities {
		if c == name || strings.HasPrefix(c, name+"=") {
			return true
		}
	}
	return false
}

// maxReceiveShallow bounds the "shallow" lines of one push.
const maxReceiveShallow = 10000

// ReadReceiveRequest reads a push's commands and push options from r, leaving r at the pack.
// It reads exactly the pkt-lines of both: nothing of the pack.
func ReadReceiveRequest(r io.Reader) (*ReceiveRequest, error) {
	s := pktline.NewScanner(r)
	req := &ReceiveRequest{}
	for {
		if !s.Scan() {
			return nil, scanError(s, "the push's commands")
		}
		line := s.Bytes()
		if len(line) == 0 {
			break // flush: the commands are over
		}
		if bytes.HasPrefix(line, []byte("shallow ")) && len(req.Updates) == 0 {
			id, ok := parseHash(bytes.TrimSuffix(line[len("shallow "):], []byte("\n")))
			if !ok {
				return nil, fmt.Errorf("a malformed shallow line %q", truncateText(string(line), 120))
			}
			if len(req.Shallow) == maxReceiveShallow {
				return nil, fmt.Errorf("a push from a clone shallow at more than %d commits", maxReceiveShallow)
			}
			req.Shallow = append(req.Shallow, id)
			continue
		}
		if len(req.Updates) == maxReceiveCommands {
			return nil, fmt.Errorf("a push of more than %d refs", maxReceiveCommands)
		}
		cmd, caps, _ := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte{0})
		u, err := parseRefUpdate(string(cmd))
		if err != nil {
			return nil, err
		}
		if len(req.Updates) == 0 {
			req.Capabilities = strings.Fields(string(caps))
		}
		req.Updates = append(req.Updates, u)
	}
	if len(req.Updates) == 0 {
		return nil, errors.New("a push without a ref to update")
	}
	if !req.Asked("push-options") {
		return req, nil
	}
	for {
		if !s.Scan() {
			return nil, scanError(s, "the push options")
		}
		line := s.Bytes()
		if len(line) == 0 {
			return req, nil
		}
		if len(req.Options) == maxPushOptions || len(line) > maxPushOptionBytes {
			return nil, fmt.Errorf("more than %d push options, or one longer than %d bytes", maxPushOptions, maxPushOptionBytes)
		}
		req.Options = append(req.Options, strings.TrimSuffix(string(line), "\n"))
	}
}

func scanError(s *pktline.Scanner, what string) error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: the request ended early", what)
}

// parseRefUpdate reads "OLD NEW REFNAME".
func parseRefUpdate(cmd string) (RefUpdate, error) {
	old, rest, ok1 := strings.Cut(cmd, " ")
	newID, name, ok2 := strings.Cut(rest, " ")
	o, okOld := parseHash([]byte(old))
	n, okNew := parseHash([]byte(newID))
	if !ok1 || !ok2 || !okOld || !okNew || name == "" || strings.ContainsAny(name, " \x00") {
		return RefUpdate{}, fmt.Errorf("a malformed ref update %q", truncateText(cmd, 120))
	}
	return RefUpdate{Old: o, New: n, Name: name}, nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// RefStatus is the outcome of one ref update: Refusal empty for ok.
type RefStatus struct {
	Name    string
	Refusal string
}

// ReceiveReporter answers a push: progress lines git prints as "remote: ...", then the status
// report, through side-band when git asked for it (progress is dropped otherwise, as git's own
// receive-pack does without a channel for it).
type ReceiveReporter struct {
	w       io.Writer
	mux     *sideband.Muxer // nil without side-band
	quiet   bool
	written bool
}

// NewReceiveReporter answers the reporter of req's answer on w.
func NewReceiveReporter(w io.Writer, req *ReceiveRequest) *ReceiveReporter {
	r := &ReceiveReporter{w: w, quiet: req.Asked("quiet")}
	if req.Asked("side-band-64k") {
		r.mux = sideband.NewMuxer(sideband.Sideband64k, w)
	}
	return r
}

// Progress writes one line of progress (git shows it as "remote: LINE"). Each line is cleaned
// of what a terminal would act on by the caller; here only its end is made a newline.
func (r *ReceiveReporter) Progress(line string) error {
	return r.message(sideband.ProgressMessage, line)
}

// Message writes a line git shows as "remote: LINE" even to a quiet push: a refusal's reasons,
// the verdict.
func (r *ReceiveReporter) Message(line string) error {
	if r.mux == nil {
		return nil
	}
	_, err := r.mux.WriteChannel(sideband.ProgressMessage, []byte(strings.TrimRight(line, "\n")+"\n"))
	return err
}

func (r *ReceiveReporter) message(ch sideband.Channel, line string) error {
	if r.mux == nil || r.quiet {
		return nil
	}
	_, err := r.mux.WriteChannel(ch, []byte(strings.TrimRight(line, "\n")+"\n"))
	return err
}

// Report writes the status report: "unpack ok" or the unpack's refusal, then one line per ref,
// and ends the answer. git exits non-zero when a ref was refused or the unpack failed.
func (r *ReceiveReporter) Report(unpackRefusal string, refs []RefStatus) error {
	var buf bytes.Buffer
	e := pktline.NewEncoder(&buf)
	unpack := "unpack ok\n"
	if unpackRefusal != "" {
		unpack = "unpack " + oneLine(unpackRefusal) + "\n"
	}
	if err := e.EncodeString(unpack); err != nil {
		return err
	}
	for _, s := range refs {
		line := "ok " + s.Name + "\n"
		if s.Refusal != "" {
			line = "ng " + s.Name + " " + oneLine(s.Refusal) + "\n"
		}
		if err := e.EncodeString(line); err != nil {
			return err
		}
	}
	if err := e.Flush(); err != nil {
		return err
	}
	if r.mux == nil {
		_, err := r.w.Write(buf.Bytes())
		return err
	}
	// The report is the data channel's content, in pieces that fit a side-band packet: a
	// pkt-line's payload, the channel's byte included (go-git's muxer cuts at 4 bytes more,
	// which its own encoder then refuses).
	for b := buf.Bytes(); len(b) > 0; {
		n := min(len(b), pktline.MaxPayloadSize-1)
		if _, err := r.mux.WriteChannel(sideband.PackData, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return pktline.NewEncoder(r.w).Flush()
}

// oneLine makes a refusal one line of a pkt-line: git prints it after "! [remote rejected]".
func oneLine(s string) string {
	s = strings.NewReplacer("\n", "; ", "\r", " ", "\x00", " ").Replace(strings.TrimSpace(s))
	if len(s) > 900 {
		s = s[:900] + "..."
	}
	return s
}
