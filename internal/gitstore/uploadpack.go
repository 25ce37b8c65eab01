package gitstore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// MainBranch is the one branch a repository is served with; HEAD points to it.
const MainBranch = plumbing.ReferenceName("refs/heads/main")

// Snapshot is one repository as it is served: its objects and its mainline commit.
type Snapshot struct {
	Objects storer.EncodedObjectStorer
	Main    plumbing.Hash // zero when the repository has no commit yet
	// Shallow is where the repository's history stops (an import of a shallow clone): commits
	// whose parents it does not hold. They are served as git serves a shallow repository's: a
	// "shallow" line each after the references, so that a clone is shallow at the same commits,
	// and no walk goes past them.
	Shallow []plumbing.Hash
	// Cache, when set, keeps the last pack a whole clone of the mainline was sent, under
	// CacheKey (the repository's name), for the next one (packcache.go).
	Cache    *PackCache
	CacheKey string
}

// ErrNotFound is what Handler's open answers for a repository that does not exist (or that
// the caller may not see): the handler answers 404.
var ErrNotFound = errors.New("repository not found")

// maxRequestBytes bounds an upload-pack request, after decompression: wants and haves are 50
// bytes each, and a client sends its haves in rounds of at most a few thousand.
const maxRequestBytes = 16 << 20

// packWindow is the delta window of the packs sent, as go-git's own server uses.
const packWindow = 10

// Handler answers git's smart HTTP protocol (v0; a client asking for v2 falls back to it) for
// one repository, read-only: `GET info/refs?service=git-upload-pack` and
// `POST git-upload-pack`. Push (receive-pack) is refused with 403 and a message git shows to
// its user. It authenticates nobody, and the server's edge passes every path outside the AGWP
// services through: whoever mounts it must put an authenticating handler in front of it (a
// reader's bearer token), with a test that a request without one is refused. Mount it under
// the repository's prefix with http.StripPrefix, e.g. "/git/REPO.git".
type Handler struct {
	open func(ctx context.Context) (Snapshot, error)
}

// NewHandler answers a Handler serving what open answers, called once per request with the
// request's context. Each request reads one snapshot; the mainline may move between a
// client's requests, which the protocol allows (see wantable).
func NewHandler(open func(ctx context.Context) (Snapshot, error)) *Handler {
	return &Handler{open: open}
}

const pushRefused = "ag serves git read-only: push is refused. Integrate changes with `ag integrate` from an ag checkout.\n"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := path.Clean("/" + r.URL.Path); p {
	case "/info/refs":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			textError(w, http.StatusMethodNotAllowed, "info/refs is read with GET\n")
			return
		}
		switch r.URL.Query().Get("service") {
		case "git-upload-pack":
		case "git-receive-pack":
			textError(w, http.StatusForbidden, pushRefused)
			return
		default:
			textError(w, http.StatusForbidden, "ag serves git over the smart HTTP protocol only; use git 1.6.6 or later\n")
			return
		}
		snap, ok := h.snapshot(w, r)
		if !ok {
			return
		}
		var buf bytes.Buffer
		if err := AdvertiseRefs(&buf, snap); err != nil {
			textError(w, http.StatusInternalServerError, "could not list the repository's references\n")
			return
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		noCache(w)
		_, _ = w.Write(buf.Bytes())
	case "/git-upload-pack":
		if r.Method != http.MethodPost {
			textError(w, http.StatusMethodNotAllowed, "git-upload-pack is called with POST\n")
			return
		}
		if r.Header.Get("Content-Type") != "application/x-git-upload-pack-request" {
			textError(w, http.StatusUnsupportedMediaType, "expected Content-Type application/x-git-upload-pack-request\n")
			return
		}
		var body io.Reader = http.MaxBytesReader(w, r.Body, maxRequestBytes)
		switch r.Header.Get("Content-Encoding") {
		case "", "identity":
		case "gzip", "x-gzip":
			gz, err := gzip.NewReader(body)
			if err != nil {
				textError(w, http.StatusBadRequest, "the request body is not gzip\n")
				return
			}
			defer gz.Close()
			body = io.LimitReader(gz, maxRequestBytes)
		default:
			textError(w, http.StatusUnsupportedMediaType, "unsupported Content-Encoding\n")
			return
		}
		snap, ok := h.snapshot(w, r)
		if !ok {
			return
		}
		req, err := ReadUploadPackRequest(body)
		if err != nil {
			textError(w, http.StatusBadRequest, err.Error()+"\n")
			return
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
		noCache(w)
		bw := bufio.NewWriterSize(w, 64<<10)
		// Once the answer has begun, an error can only be told in it (UploadPack does) or by
		// cutting the response short, which git reports as an incomplete pack.
		_ = UploadPack(r.Context(), bw, snap, req)
		_ = bw.Flush()
	case "/git-receive-pack":
		textError(w, http.StatusForbidden, pushRefused)
	default:
		textError(w, http.StatusNotFound, "not a git smart HTTP path\n")
	}
}

func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) (Snapshot, bool) {
	snap, err := h.open(r.Context())
	switch {
	case errors.Is(err, ErrNotFound):
		textError(w, http.StatusNotFound, "repository not found\n")
		return Snapshot{}, false
	case err != nil:
		textError(w, http.StatusInternalServerError, "could not open the repository\n")
		return Snapshot{}, false
	}
	return snap, true
}

// textError answers a plain text message, which git prints to its user as "remote: ...".
func textError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	noCache(w)
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

func noCache(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	w.Header().Set("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
	w.Header().Set("Pragma", "no-cache")
}

// capabilities answers what upload-pack advertises: negotiation with multi_ack_detailed (a
// stateless HTTP client needs ACKs to stop sending haves it has in common), the pack on
// side-band-64k, offset deltas, and HEAD's target. "shallow" lets a shallow clone (every clone
// of a shallow repository is one) fetch, sending its "shallow" lines; a request to deepen or
// cut a history (--depth) is refused, and deepen-since and deepen-not are not offered, so git
// refuses --shallow-since and --shallow-exclude itself.
func capabilities(snap Snapshot) (*capability.List, error) {
	c := capability.NewList()
	for _, x := range []capability.Capability{capability.MultiACKDetailed, capability.Sideband64k, capability.OFSDelta, capability.ThinPack, capability.NoProgress, capability.Shallow} {
		if err := c.Set(x); err != nil {
			return nil, err
		}
	}
	if err := c.Set(capability.ObjectFormat, "sha1"); err != nil {
		return nil, err
	}
	if err := c.Set(capability.Agent, "ag"); err != nil {
		return nil, err
	}
	if !snap.Main.IsZero() {
		if err := c.Set(capability.SymRef, "HEAD:"+MainBranch.String()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// AdvertiseRefs writes the answer to `GET info/refs?service=git-upload-pack`: the service
// line, then HEAD and refs/heads/main at the mainline commit with the capabilities, then a
// "shallow" line for each commit the history stops at, as git's upload-pack (protocol v0)
// advertises its shallow file: git writes those the pack holds into a clone's .git/shallow.
func AdvertiseRefs(w io.Writer, snap Snapshot) error {
	ar := packp.NewAdvRefs()
	ar.Prefix = [][]byte{[]byte("# service=git-upload-pack"), pktline.Flush}
	caps, err := capabilities(snap)
	if err != nil {
		return err
	}
	ar.Capabilities = caps
	if !snap.Main.IsZero() {
		main := snap.Main
		ar.Head = &main
		ar.References[MainBranch.String()] = main
		ar.Shallows = slices.Clone(snap.Shallow)
	}
	return ar.Encode(w)
}

// UploadPackRequest is one stateless upload-pack request: the wants with the capabilities the
// client chose, the haves of this round, and whether the client is done negotiating.
type UploadPackRequest struct {
	*packp.UploadRequest
	Haves []plumbing.Hash
	Done  bool
}

// ReadUploadPackRequest reads a request: the wants (go-git's packp.UploadRequest), then the
// have lines up to a flush or "done".
func ReadUploadPackRequest(r io.Reader) (*UploadPackRequest, error) {
	ur := packp.NewUploadRequest()
	if err := ur.Decode(r); err != nil {
		return nil, fmt.Errorf("upload-pack request: %w", err)
	}
	req := &UploadPackRequest{UploadRequest: ur}
	sc := pktline.NewScanner(r)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\n"))
		switch {
		case len(line) == 0: // the flush ending a round of haves
		case string(line) == "done":
			req.Done = true
			return req, nil
		case bytes.HasPrefix(line, []byte("have ")) && len(line) == 45:
			h, ok := parseHash(line[5:])
			if !ok {
				return nil, fmt.Errorf("upload-pack request: bad have line %q", line)
			}
			req.Haves = append(req.Haves, h)
		default:
			return nil, fmt.Errorf("upload-pack request: unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("upload-pack request: %w", err)
	}
	return req, nil
}

func parseHash(b []byte) (plumbing.Hash, bool) {
	if len(b) != 40 || !plumbing.IsHash(string(b)) {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(string(b)), true
}

// UploadPack answers one stateless request of snap: ACK or NAK lines for the haves it has in
// common, then, when the client is done, a pack of what the wants hold beyond the common
// commits. Errors found before the pack is sent are written as git's "ERR" line.
func UploadPack(ctx context.Context, w io.Writer, snap Snapshot, req *UploadPackRequest) error {
	enc := pktline.NewEncoder(w)
	fail := func(err error) error {
		_ = enc.EncodeString("ERR upload-pack: " + err.Error() + "\n")
		return err
	}
	caps, err := capabilities(snap)
	if err != nil {
		return fail(err)
	}
	for _, c := range req.Capabilities.All() {
		if !caps.Supports(c) {
			return fail(fmt.Errorf("unsupported capability %s", c))
		}
	}
	if req.Depth != nil && !req.Depth.IsZero() {
		return fail(errors.New("ag serves no shallow fetch (--depth, --deepen, --unshallow): fetch without them; the history ag serves is the one it holds" + shallowNote(snap)))
	}
	if len(req.Wants) == 0 {
		return fail(errors.New("no want lines"))
	}
	if err := wantable(ctx, snap, req.Wants); err != nil {
		return fail(err)
	}
	var common []plumbing.Hash
	for _, h := range req.Haves {
		if _, err := snap.Objects.EncodedObject(plumbing.CommitObject, h); err == nil {
			common = append(common, h)
		} else if !errors.Is(err, plumbing.ErrObjectNotFound) {
			return fail(fmt.Errorf("read have %s: %w", h, err))
		}
	}
	multiAck := req.Capabilities.Supports(capability.MultiACKDetailed)
	if !req.Done {
		// A round of negotiation: say which haves are common, and let the client go on.
		if !multiAck {
			if len(common) > 0 {
				return enc.Encodef("ACK %s\n", common[0])
			}
			return enc.EncodeString("NAK\n")
		}
		for _, h := range common {
			if err := enc.Encodef("ACK %s common\n", h); err != nil {
				return err
			}
		}
		return enc.EncodeString("NAK\n")
	}
	// A commit the client says it holds without its parents (its .git/shallow, sent as
	// "shallow" lines) is a boundary of the walk too, as git's upload-pack grafts it: what lies
	// below it is neither the client's nor, unless another way reaches it, wanted.
	var (
		list  *sendList
		clone *clonePack
	)
	if snap.wholeClone(req, common) {
		if clone, err = snap.planClone(ctx, req.Wants); err != nil {
			return fail(err)
		}
		defer clone.close()
		list = clone.list
	} else if list, err = listObjects(ctx, snap.Objects, req.Wants, common, snap.stops(req.Shallows...)); err != nil {
		return fail(err)
	}
	objs, bases := list.ids, list.bases
	// A fetch from a client that takes a thin pack: what it has is a delta base too, as
	// git's own upload-pack sends (a changed file as a delta against the version the client
	// holds).
	var thin map[plumbing.Hash]plumbing.Hash
	if len(common) > 0 && req.Capabilities.Supports(capability.ThinPack) && len(list.older) > 0 {
		thin = list.older
	}
	switch {
	case len(common) > 0 && multiAck:
		err = enc.Encodef("ACK %s\n", common[len(common)-1])
	case len(common) > 0:
		err = enc.Encodef("ACK %s\n", common[0])
	default:
		err = enc.EncodeString("NAK\n")
	}
	if err != nil {
		return err
	}
	var out io.Writer = w
	var mux *sideband.Muxer
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		mux = sideband.NewMuxer(sideband.Sideband64k, w)
		out = mux
	case req.Capabilities.Supports(capability.Sideband):
		mux = sideband.NewMuxer(sideband.Sideband, w)
		out = mux
	}
	total := len(objs)
	if clone != nil {
		total = clone.objects()
	}
	if mux != nil && !req.Capabilities.Supports(capability.NoProgress) {
		_, _ = mux.WriteChannel(sideband.ProgressMessage, fmt.Appendf(nil, "ag: sending %d objects\n", total))
	}
	switch {
	case clone != nil:
		err = clone.write(out, snap.Objects)
	case thin != nil:
		err = writePackWith(out, snap.Objects, nil, objs, bases, thin)
	default:
		err = writePack(out, snap.Objects, objs, bases)
	}
	if err != nil {
		if mux != nil {
			_, _ = mux.WriteChannel(sideband.ErrorMessage, []byte("ag: "+err.Error()+"\n"))
		}
		return err
	}
	if mux != nil {
		return enc.Flush()
	}
	return nil
}

// wholeClone reports whether req, which has common with the client, asks for the whole
// mainline of a snapshot with a pack cache: no have, no shallow line, only its commit wanted.
func (snap Snapshot) wholeClone(req *UploadPackRequest, common []plumbing.Hash) bool {
	if snap.Cache == nil || len(req.Haves) > 0 || len(common) > 0 || len(req.Shallows) > 0 || snap.Main.IsZero() {
		return false
	}
	for _, w := range req.Wants {
		if w != snap.Main {
			return false
		}
	}
	return true
}

// fromCache answers the cached pack of a whole clone of wants and the objects to send after
// it, or (nil, nil) when there is no cached pack to use: none, one of another history
// boundary, one grown a quarter past the one last built afresh, or one whose commits the
// wants do not reach (a repository made anew under the same name).
func (snap Snapshot) fromCache(ctx context.Context, wants []plumbing.Hash) (*sendList, *cachedPack, error) {
	cached := snap.Cache.open(snap.CacheKey)
	if cached == nil {
		return nil, nil, nil
	}
	tips, err := cached.tips()
	if err != nil || !slices.Equal(cached.meta.Stops, hashStrings(snap.Shallow)) || len(tips) == 0 ||
		cached.bytes > cached.meta.BuiltBytes+cached.meta.BuiltBytes/4 {
		cached.close()
		return nil, nil, nil
	}
	for _, t := range tips {
		// A tip this store does not hold is another history's.
		if _, err := snap.Objects.EncodedObject(plumbing.CommitObject, t); err != nil {
			cached.close()
			if errors.Is(err, plumbing.ErrObjectNotFound) {
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("read the cached pack's commit %s: %w", t, err)
		}
	}
	list, err := listObjects(ctx, snap.Objects, wants, tips, snap.stops())
	if err != nil {
		cached.close()
		return nil, nil, err
	}
	for _, t := range tips {
		if !list.reached[t] {
			cached.close()
			return nil, nil, nil
		}
	}
	return list, cached, nil
}

// stops answers the commits a walk of snap treats as having no parents: where its history
// stops (Shallow), and more (a shallow client's own boundary).
func (snap Snapshot) stops(more ...plumbing.Hash) map[plumbing.Hash]bool {
	stops := make(map[plumbing.Hash]bool, len(snap.Shallow)+len(more))
	for _, h := range slices.Concat(snap.Shallow, more) {
		stops[h] = true
	}
	return stops
}

// shallowNote says where a shallow repository's history starts, for a refusal: "" for a whole
// history.
func shallowNote(snap Snapshot) string {
	if len(snap.Shallow) == 0 {
		return ""
	}
	ids := make([]string, len(snap.Shallow))
	for i, h := range snap.Shallow {
		ids[i] = h.String()
	}
	return fmt.Sprintf(" (history from %s on)", strings.Join(ids, ", "))
}

// wantable checks that each want is the mainline commit or one of its ancestors: what git
// calls allow-reachable-sha1-in-want, which a stateless client needs when the mainline moved
// between its requests. Candidate commits that never reached the mainline are not served. The
// walk stops where the repository's history does (Snapshot.Shallow).
func wantable(ctx context.Context, snap Snapshot, wants []plumbing.Hash) error {
	missing := make(map[plumbing.Hash]bool, len(wants))
	for _, h := range wants {
		if h != snap.Main {
			missing[h] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	stops := snap.stops()
	seen := map[plumbing.Hash]bool{snap.Main: true}
	queue := []plumbing.Hash{snap.Main}
	for len(queue) > 0 && len(missing) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if stops[queue[0]] {
			queue = queue[1:]
			continue
		}
		c, err := object.GetCommit(snap.Objects, queue[0])
		queue = queue[1:]
		if err != nil {
			return fmt.Errorf("read commit: %w", err)
		}
		for _, p := range c.ParentHashes {
			delete(missing, p)
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	for h := range missing {
		return fmt.Errorf("not our ref %s", h)
	}
	return nil
}

// objectsToSend answers the objects reachable from wants that a client holding the commits
// common (and so everything they reach) lacks. Commits are walked newest first, as git does,
// until every commit left is reachable from common; each commit to send then has its tree
// compared with its parents' trees, descending only where they differ, so the cost follows
// what changed rather than the size of the trees.
//
// Skipping what a tree shares with a parent's tree is right only when everything the parent
// reaches is already in the pack or with the client, so the trees are compared parents first.
// Compared newest first, a tree that recurs (a revert, a dependency downgrade) was marked sent
// with only its differences from the commit that brought it back, and the older commit that
// brought the rest then skipped it: clones missed blobs.
//
// The pack may hold objects the client has: one of common's objects that a sent commit holds
// at another path than its parents do (a file moved, a directory renamed or restored) is sent
// again, as git's own upload-pack does (pack.useSparse), rather than walking common's whole
// trees to find it.
//
// A commit of stops is walked as if it had no parents (git's shallow grafts): the commits a
// shallow repository's history stops at, and those a shallow client's does. Its tree is sent
// whole when it is sent.
//
// It also answers, for objects it sends, a delta base to propose for each: the newer version at
// the same path of an object a commit replaced (git's own packs keep the newest version whole
// and older ones as deltas against it), which the pack comes to before it.
func objectsToSend(ctx context.Context, s storer.EncodedObjectStorer, wants, common []plumbing.Hash, stops map[plumbing.Hash]bool) ([]plumbing.Hash, map[plumbing.Hash]plumbing.Hash, error) {
	l, err := listObjects(ctx, s, wants, common, stops)
	if err != nil {
		return nil, nil, err
	}
	return l.ids, l.bases, nil
}

// VersionPair is an object a commit replaced at a path, and the newer version that replaced it.
type VersionPair struct{ Old, New plumbing.Hash }

// NewerVersions answers, of the objects head's history holds and since's does not (since zero:
// the whole history), each one a commit replaced, with the newer version at the same path that
// replaced it: the delta bases a whole clone's pack proposes (objectsToSend), newest first, so
// that a version comes before the older one it is the newer version of. A commit of stops is
// walked as if it had no parents.
func NewerVersions(ctx context.Context, s storer.EncodedObjectStorer, head, since plumbing.Hash, stops map[plumbing.Hash]bool) ([]VersionPair, error) {
	var common []plumbing.Hash
	if !since.IsZero() {
		common = []plumbing.Hash{since}
	}
	ids, bases, err := objectsToSend(ctx, s, []plumbing.Hash{head}, common, stops)
	if err != nil {
		return nil, err
	}
	pairs := make([]VersionPair, 0, len(bases))
	for _, id := range ids {
		if newer, ok := bases[id]; ok {
			pairs = append(pairs, VersionPair{Old: id, New: newer})
		}
	}
	return pairs, nil
}

// sendList is what objectsToSend answers, and what of common the wants reach.
type sendList struct {
	ids   []plumbing.Hash
	bases map[plumbing.Hash]plumbing.Hash
	// older names, for an object sent, the version it replaced at the same path in its
	// commit's first parent, when that is not sent: the client's, a delta base of a thin pack.
	older map[plumbing.Hash]plumbing.Hash
	// reached holds the wants and the parents of the commits sent: a commit of common is an
	// ancestor of a want (or one) if and only if it is here, since the commits on the way
	// from a want down to it are not reachable from it, so are sent.
	reached map[plumbing.Hash]bool
}

func listObjects(ctx context.Context, s storer.EncodedObjectStorer, wants, common []plumbing.Hash, stops map[plumbing.Hash]bool) (*sendList, error) {
	w := &walk{s: s, commits: map[plumbing.Hash]*walkCommit{}, stops: stops}
	for _, h := range common {
		if err := w.push(h, true); err != nil {
			return nil, err
		}
	}
	for _, h := range wants {
		if err := w.push(h, false); err != nil {
			return nil, err
		}
	}
	var popped []*walkCommit
	for w.q.Len() > 0 && w.interesting > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c := w.pop()
		popped = append(popped, c)
		for _, p := range w.parents(c) {
			if err := w.push(p, c.uninteresting); err != nil {
				return nil, err
			}
		}
	}
	order, err := w.parentsFirst(popped)
	if err != nil {
		return nil, err
	}
	reached := make(map[plumbing.Hash]bool, len(wants)+len(order))
	for _, h := range wants {
		reached[h] = true
	}
	for _, c := range order {
		for _, p := range w.parents(c) {
			reached[p] = true
		}
	}
	d := &treeDiff{s: s, done: make(map[plumbing.Hash]bool), bases: make(map[plumbing.Hash]plumbing.Hash), older: make(map[plumbing.Hash]plumbing.Hash)}
	starts := make([]int, 0, len(order))
	for _, c := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		starts = append(starts, len(d.out))
		d.out = append(d.out, c.Hash)
		var olds []plumbing.Hash
		for _, p := range w.parents(c) {
			pc, err := w.commit(p)
			if err != nil {
				return nil, err
			}
			// The parent's tree is sent whole by now, or the client's.
			d.done[pc.TreeHash] = true
			olds = append(olds, pc.TreeHash)
		}
		if err := d.tree(c.TreeHash, olds); err != nil {
			return nil, err
		}
	}
	// Newest commit first, each followed by what it brought, as the walk found them: git's
	// order, which puts the wanted checkout's files near the pack's start. Reversed in place,
	// then each commit's part back, so a clone's list is not held twice.
	out := d.out
	slices.Reverse(out)
	for i, start := range starts {
		end := len(out)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		slices.Reverse(out[len(out)-end : len(out)-start])
	}
	sent := make(map[plumbing.Hash]bool, len(out))
	for _, id := range out {
		sent[id] = true
	}
	for id, old := range d.older {
		if sent[old] {
			delete(d.older, id)
		}
	}
	return &sendList{ids: out, bases: d.bases, older: d.older, reached: reached}, nil
}

// treeDiff collects the trees and blobs of the commits objectsToSend sends, a commit at a
// time, each commit after its parents.
type treeDiff struct {
	s storer.EncodedObjectStorer
	// done holds the trees and blobs whose whole closure is in out or with the client: a
	// tree is added once all it reaches is, never when only its differences from some
	// other tree are.
	done map[plumbing.Hash]bool
	out  []plumbing.Hash
	// bases proposes a delta base for an object: its newer version at the same path.
	bases map[plumbing.Hash]plumbing.Hash
	// older is the other way: an object's older version at the same path (sendList.older).
	older map[plumbing.Hash]plumbing.Hash
}

// tree appends to out tree t and what it holds that is not done, descending only into
// subtrees that differ from olds (the trees at the same path in the commit's parents).
func (d *treeDiff) tree(t plumbing.Hash, olds []plumbing.Hash) error {
	if d.done[t] {
		return nil
	}
	// Done before its entries are: no tree holds itself, so nothing below asks for t, and t
	// is whole when this call returns, before anything else can ask.
	d.done[t] = true
	d.out = append(d.out, t)
	tree, err := object.GetTree(d.s, t)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", t, err)
	}
	oldEntries := make([]map[string]object.TreeEntry, 0, len(olds))
	for _, o := range olds {
		ot, err := object.GetTree(d.s, o)
		if err != nil {
			return fmt.Errorf("read tree %s: %w", o, err)
		}
		m := make(map[string]object.TreeEntry, len(ot.Entries))
		for _, e := range ot.Entries {
			m[e.Name] = e
			// A parent is sent whole before its children or is the client's, and so is
			// everything its trees hold, under any name: a file renamed in this
			// directory is not sent again.
			if e.Mode != filemode.Submodule {
				d.done[e.Hash] = true
			}
		}
		oldEntries = append(oldEntries, m)
	}
	for _, e := range tree.Entries {
		switch {
		case e.Mode == filemode.Submodule: // a gitlink names a commit of another repository
		case d.done[e.Hash]:
		case e.Mode == filemode.Dir:
			d.proposeBase(e, oldEntries)
			var subOlds []plumbing.Hash
			for _, m := range oldEntries {
				if oe, ok := m[e.Name]; ok && oe.Mode == filemode.Dir {
					subOlds = append(subOlds, oe.Hash)
				}
			}
			if err := d.tree(e.Hash, subOlds); err != nil {
				return err
			}
		default:
			d.proposeBase(e, oldEntries)
			d.done[e.Hash] = true
			d.out = append(d.out, e.Hash)
		}
	}
	return nil
}

// proposeBase proposes e, new in its commit, as the delta base of the entry of the same name and
// kind in the first parent's tree: the older version, which the pack comes to after e.
func (d *treeDiff) proposeBase(e object.TreeEntry, oldEntries []map[string]object.TreeEntry) {
	if len(oldEntries) == 0 {
		return
	}
	oe, ok := oldEntries[0][e.Name]
	if !ok || oe.Hash == e.Hash || (oe.Mode == filemode.Dir) != (e.Mode == filemode.Dir) || oe.Mode == filemode.Submodule {
		return
	}
	if _, taken := d.bases[oe.Hash]; !taken {
		d.bases[oe.Hash] = e.Hash
	}
	if _, taken := d.older[e.Hash]; !taken {
		d.older[e.Hash] = oe.Hash
	}
}

// walk is the commit walk of objectsToSend: a queue by committer time, newest first.
type walk struct {
	s           storer.EncodedObjectStorer
	commits     map[plumbing.Hash]*walkCommit
	stops       map[plumbing.Hash]bool // commits walked as if they had no parents
	q           commitQueue
	interesting int // commits in q not known to be reachable from common
}

// parents answers the parents the walk follows from c: none from a commit of stops.
func (w *walk) parents(c *walkCommit) []plumbing.Hash {
	if w.stops[c.Hash] {
		return nil
	}
	return c.ParentHashes
}

type walkCommit struct {
	*object.Commit
	uninteresting bool
	state         int  // walkNew, walkQueued, walkPopped
	ordered       bool // by parentsFirst
}

const (
	walkNew = iota
	walkQueued
	walkPopped
)

func (w *walk) commit(h plumbing.Hash) (*walkCommit, error) {
	if c, ok := w.commits[h]; ok {
		return c, nil
	}
	c, err := object.GetCommit(w.s, h)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", h, err)
	}
	wc := &walkCommit{Commit: c}
	w.commits[h] = wc
	return wc, nil
}

// push queues commit h once. uninteresting marks it reachable from common, and with it the
// parents of a commit already walked.
func (w *walk) push(h plumbing.Hash, uninteresting bool) error {
	c, err := w.commit(h)
	if err != nil {
		return err
	}
	if uninteresting && !c.uninteresting {
		if err := w.markUninteresting(c); err != nil {
			return err
		}
	}
	if c.state == walkNew {
		c.state = walkQueued
		if !c.uninteresting {
			w.interesting++
		}
		heap.Push(&w.q, c)
	}
	return nil
}

func (w *walk) markUninteresting(c *walkCommit) error {
	stack := []*walkCommit{c}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if c.uninteresting {
			continue
		}
		c.uninteresting = true
		switch c.state {
		case walkQueued:
			w.interesting--
		case walkPopped: // its parents were pushed as interesting
			for _, p := range w.parents(c) {
				pc, err := w.commit(p)
				if err != nil {
					return err
				}
				stack = append(stack, pc)
			}
		}
	}
	return nil
}

func (w *walk) pop() *walkCommit {
	c := heap.Pop(&w.q).(*walkCommit)
	c.state = walkPopped
	if !c.uninteresting {
		w.interesting--
	}
	return c
}

// parentsFirst answers the commits of popped still to send, each after those of its parents
// that are sent too. Committer times put parents first in most histories but not in all
// (skewed clocks, imported commits keep their times), so the order is a depth-first one.
// Every parent of a commit to send is one too or is reachable from common: the walk pushed
// it, and stopped only when every commit queued was.
func (w *walk) parentsFirst(popped []*walkCommit) ([]*walkCommit, error) {
	toSend := func(c *walkCommit) bool { return !c.uninteresting && c.state == walkPopped }
	order := make([]*walkCommit, 0, len(popped))
	type frame struct {
		c    *walkCommit
		next int // the index of the parent to look at next
	}
	var stack []frame
	// Oldest first, so that in a linear history each commit's parent is already ordered and
	// the stack stays one deep.
	for i := len(popped) - 1; i >= 0; i-- {
		if c := popped[i]; toSend(c) && !c.ordered {
			c.ordered = true
			stack = append(stack, frame{c: c})
		}
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			parents := w.parents(f.c)
			if f.next == len(parents) {
				order = append(order, f.c)
				stack = stack[:len(stack)-1]
				continue
			}
			p, err := w.commit(parents[f.next])
			f.next++
			if err != nil {
				return nil, err
			}
			switch {
			case p.uninteresting || p.ordered:
			case p.state != walkPopped:
				return nil, fmt.Errorf("commit %s: parent %s is neither sent nor the client's", f.c.Hash, p.Hash)
			default:
				p.ordered = true
				stack = append(stack, frame{c: p})
			}
		}
	}
	return order, nil
}

// commitQueue is a heap of commits, the newest committer time first.
type commitQueue []*walkCommit

func (q commitQueue) Len() int { return len(q) }
func (q commitQueue) Less(i, j int) bool {
	ti, tj := q[i].Committer.When, q[j].Committer.When
	if !ti.Equal(tj) {
		return ti.After(tj)
	}
	return bytes.Compare(q[i].Hash[:], q[j].Hash[:]) < 0
}
func (q commitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)   { *q = append(*q, x.(*walkCommit)) }
func (q *commitQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}
