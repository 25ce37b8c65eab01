package storetest

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// rbundle is a bundle whose store keeps repositories, leases and changes.
type rbundle struct {
	*bundle
	rs store.RepoStore
}

// setupRepos answers a fresh store with its repository half at hand.
func setupRepos(t *testing.T, newStore Factory) *rbundle {
	t.Helper()
	b := setup(t, newStore)
	return &rbundle{bundle: b, rs: b.st}
}

// The holders and principals of the tests.
const (
	alice  = "alice|w1"
	alice2 = "alice|w2" // another label of the same principal: another holder
	bob    = "bob|w1"
)

func (b *rbundle) createRepo(t *testing.T, name string) store.Repository {
	t.Helper()
	r, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: name, CreatedBy: "admin"})
	if err != nil {
		t.Fatalf("CreateRepository(%q): %v", name, err)
	}
	return r
}

func (b *rbundle) repository(t *testing.T, name string) store.Repository {
	t.Helper()
	r, err := b.rs.GetRepository(b.ctx, name)
	if err != nil {
		t.Fatalf("GetRepository(%q): %v", name, err)
	}
	return r
}

func (b *rbundle) revision(t *testing.T, repository, id string) store.Revision {
	t.Helper()
	rev, err := b.rs.GetRevision(b.ctx, repository, id)
	if err != nil {
		t.Fatalf("GetRevision(%q, %s): %v", repository, id, err)
	}
	return rev
}

// mainlineTree answers the tree of a repository's mainline.
func (b *rbundle) mainlineTree(t *testing.T, repository string) repo.Tree {
	t.Helper()
	return b.revision(t, repository, b.repository(t, repository).Mainline).Tree
}

// blobOf answers content as a blob.
func blobOf(content string) store.Blob {
	return store.Blob{Digest: repo.Digest([]byte(content)), Content: []byte(content)}
}

// treeOf answers the tree holding files (path → content).
func treeOf(files map[string]string) repo.Tree {
	t := repo.Tree{}
	for path, content := range files {
		t = append(t, repo.Entry{Path: path, Digest: repo.Digest([]byte(content)), Size: uint64(len(content))})
	}
	sort.Slice(t, func(i, j int) bool { return t[i].Path < t[j].Path })
	return t
}

// assertTree fails the test unless got holds exactly the entries of want.
func assertTree(t *testing.T, what string, got, want repo.Tree) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %v\n want %v", what, got, want)
	}
}

// diffFields answers the fields where got differs from want (two values of one struct type),
// one per line: times as instants, JSON as values, absent and empty lists alike.
func diffFields(got, want any) string {
	var b strings.Builder
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		var equal bool
		switch gt := g.(type) {
		case time.Time:
			equal = gt.Equal(w.(time.Time))
		case []byte:
			equal = jsonEqual(gt, w.([]byte))
			g, w = string(gt), string(w.([]byte))
		case []string:
			equal = slices.Equal(gt, w.([]string))
		case repo.Tree:
			equal = (len(gt) == 0 && len(w.(repo.Tree)) == 0) || reflect.DeepEqual(gt, w)
		default:
			equal = reflect.DeepEqual(g, w)
		}
		if !equal {
			fmt.Fprintf(&b, "  %s: got %v, want %v\n", name, g, w)
		}
	}
	return b.String()
}

func assertFields(t *testing.T, what string, got, want any) {
	t.Helper()
	if diff := diffFields(got, want); diff != "" {
		t.Fatalf("%s:\n%s", what, diff)
	}
}

func testCreateRepository(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "admin"})
	if err != nil {
		t.Fatalf("CreateRepository: %v", err)
	}
	if r.Mainline == "" {
		t.Fatalf("CreateRepository = %+v: no mainline", r)
	}
	assertFields(t, "CreateRepository", r, store.Repository{Name: "web", Mainline: r.Mainline, MainlineCommit: r.MainlineCommit, CreatedAt: epoch})
	assertFields(t, "GetRepository", b.repository(t, "web"), r)

	first := b.revision(t, "web", r.Mainline)
	assertFields(t, "the first revision", first, store.Revision{
		ID: r.Mainline, Repository: "web", Holder: "admin", Tree: repo.Tree{}, TreeDigest: repo.Tree{}.Digest(),
		GitTree: gitstore.EmptyTree.String(), GitCommit: r.MainlineCommit, CreatedAt: epoch,
	})
	b.wantCommit(t, first, "Create repository web")

	_, err = b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "root"})
	wantErr(t, "CreateRepository of a taken name", err, store.ErrAlreadyExists)
	assertFields(t, "GetRepository after a refused create", b.repository(t, "web"), r)

	_, err = b.rs.GetRepository(b.ctx, "nope")
	wantErr(t, "GetRepository of an unknown name", err, store.ErrNotFound)

	validation := []byte(`{"command": ["make", "test"], "timeout": "600s"}`)
	api, err := b.rs.CreateRepository(b.ctx, store.CreateRepositoryParams{Name: "api", Validation: validation, CreatedBy: "admin"})
	if err != nil {
		t.Fatalf("CreateRepository with a validation policy: %v", err)
	}
	if !jsonEqual(api.Validation, validation) || !jsonEqual(b.repository(t, "api").Validation, validation) {
		t.Fatalf("the validation policy = %s, want %s", api.Validation, validation)
	}
	if api.Mainline == r.Mainline {
		t.Fatalf("two repositories share the first revision %s", api.Mainline)
	}

	changes, next, err := b.rs.ListChanges(b.ctx, store.ListChangesParams{Repository: "web"})
	if err != nil || len(changes) != 0 || next != "" {
		t.Fatalf("ListChanges of a new repository = %d changes, next %q, %v; want none", len(changes), next, err)
	}
	leases, next, err := b.rs.ListLeases(b.ctx, store.ListLeasesParams{Repository: "web", IncludeEnded: true})
	if err != nil || len(leases) != 0 || next != "" {
		t.Fatalf("ListLeases of a new repository = %d leases, next %q, %v; want none", len(leases), next, err)
	}
}

func testListRepositories(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	repos, next, err := b.rs.ListRepositories(b.ctx, store.ListRepositoriesParams{})
	if err != nil || len(repos) != 0 || next != "" {
		t.Fatalf("ListRepositories of an empty store = %d, next %q, %v; want none", len(repos), next, err)
	}
	names := []string{"web", "api", "docs", "a.b-c_d", "zeta"}
	for _, n := range names {
		b.createRepo(t, n)
	}
	slices.Sort(names)
	var got []string
	pages := 0
	p := store.ListRepositoriesParams{Limit: 2}
	for {
		page, next, err := b.rs.ListRepositories(b.ctx, p)
		if err != nil {
			t.Fatalf("ListRepositories(%+v): %v", p, err)
		}
		pages++
		if len(page) > 2 || (next != "" && len(page) == 0) {
			t.Fatalf("ListRepositories page %d: %d repositories, next %q", pages, len(page), next)
		}
		for _, r := range page {
			got = append(got, r.Name)
			assertFields(t, "ListRepositories: "+r.Name, r, b.repository(t, r.Name))
		}
		if next == "" {
			break
		}
		if pages > 10 {
			t.Fatalf("ListRepositories did not end")
		}
		p.PageToken = next
	}
	if !slices.Equal(got, names) {
		t.Fatalf("ListRepositories = %v, want %v", got, names)
	}
	_, _, err = b.rs.ListRepositories(b.ctx, store.ListRepositoriesParams{PageToken: "!!!"})
	wantErr(t, "ListRepositories(malformed page token)", err, store.ErrInvalidPageToken)
}

func testBlobs(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	one, two, empty := blobOf("one\n"), blobOf("two\x00bytes\xff"), blobOf("")
	three, four := blobOf("three"), blobOf("four")

	if err := b.rs.PutBlobs(b.ctx, nil); err != nil {
		t.Fatalf("PutBlobs(nil): %v", err)
	}
	missing, err := b.rs.MissingBlobs(b.ctx, []string{one.Digest, empty.Digest})
	if err != nil || !slices.Equal(missing, []string{one.Digest, empty.Digest}) {
		t.Fatalf("MissingBlobs of an empty store = %v, %v; want both", missing, err)
	}
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{one, two, empty}); err != nil {
		t.Fatalf("PutBlobs: %v", err)
	}
	for _, want := range []store.Blob{one, two, empty} {
		got, err := b.rs.GetBlob(b.ctx, want.Digest)
		if err != nil || got.Digest != want.Digest || !bytes.Equal(got.Content, want.Content) {
			t.Fatalf("GetBlob(%s) = %q (%s), %v; want %q", want.Digest, got.Content, got.Digest, err, want.Content)
		}
	}
	// A stored blob is left as it is, whatever a second put carries.
	if err := b.rs.PutBlobs(b.ctx, []store.Blob{{Digest: one.Digest, Content: []byte("not one")}, three}); err != nil {
		t.Fatalf("PutBlobs again: %v", err)
	}
	if got, err := b.rs.GetBlob(b.ctx, one.Digest); err != nil || !bytes.Equal(got.Content, one.Content) {
		t.Fatalf("GetBlob after a second put = %q, %v; want %q", got.Content, err, one.Content)
	}

	missing, err = b.rs.MissingBlobs(b.ctx, []string{four.Digest, one.Digest, blobOf("five").Digest, three.Digest, empty.Digest})
	if err != nil || !slices.Equal(missing, []string{four.Digest, blobOf("five").Digest}) {
		t.Fatalf("MissingBlobs = %v, %v; want [%s %s] in the order given", missing, err, four.Digest, blobOf("five").Digest)
	}
	if missing, err := b.rs.MissingBlobs(b.ctx, nil); err != nil || len(missing) != 0 {
		t.Fatalf("MissingBlobs(nil) = %v, %v; want none", missing, err)
	}
	sizes, err := b.rs.BlobSizes(b.ctx, []string{one.Digest, four.Digest, empty.Digest})
	if err != nil || len(sizes) != 2 || sizes[one.Digest] != uint64(len(one.Content)) || sizes[empty.Digest] != 0 {
		t.Fatalf("BlobSizes = %v, %v; want %s: %d and %s: 0, and nothing for the missing %s",
			sizes, err, one.Digest, len(one.Content), empty.Digest, four.Digest)
	}
	if _, held := sizes[empty.Digest]; !held {
		t.Fatalf("BlobSizes lacks the empty blob, which is held")
	}
	_, err = b.rs.GetBlob(b.ctx, four.Digest)
	wantErr(t, "GetBlob of a missing blob", err, store.ErrNotFound)

	// Many digests at once.
	var many []string
	var want []string
	for i := range 1500 {
		bl := blobOf(fmt.Sprintf("blob %d", i))
		many = append(many, bl.Digest)
		if i%3 == 0 {
			if err := b.rs.PutBlobs(b.ctx, []store.Blob{bl}); err != nil {
				t.Fatalf("PutBlobs: %v", err)
			}
		} else {
			want = append(want, bl.Digest)
		}
	}
	if missing, err := b.rs.MissingBlobs(b.ctx, many); err != nil || !slices.Equal(missing, want) {
		t.Fatalf("MissingBlobs of 1500 digests = %d digests, %v; want the %d not stored", len(missing), err, len(want))
	}
}

func testGetRevisionNotFound(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	web, api := b.createRepo(t, "web"), b.createRepo(t, "api")
	_, err := b.rs.GetRevision(b.ctx, "api", web.Mainline)
	wantErr(t, "GetRevision of another repository's revision", err, store.ErrNotFound)
	_, err = b.rs.GetRevision(b.ctx, "web", "rev_unknown")
	wantErr(t, "GetRevision of an unknown revision", err, store.ErrNotFound)
	_, err = b.rs.GetRevision(b.ctx, "nope", web.Mainline)
	wantErr(t, "GetRevision in an unknown repository", err, store.ErrNotFound)
	b.revision(t, "api", api.Mainline)
}

// testRevisions follows the revisions that integrations make: each records its parent (the
// mainline it was made on), its author, its change and the digest of its tree.
func testRevisions(t *testing.T, newStore Factory) {
	b := setupRepos(t, newStore)
	r := b.createRepo(t, "web")
	l := b.acquire(t, "web", alice, time.Hour, "src/")
	lb := b.acquire(t, "web", bob, time.Hour, "docs/")

	files := map[string]string{}
	type step struct {
		holder string
		token  uint64
		edits  []fileEdit
	}
	steps := []step{
		{alice, l.FencingToken, []fileEdit{put("src/a.go", "a1"), put("src/b.go", "b1")}},
		{bob, lb.FencingToken, []fileEdit{put("docs/readme.md", "hello")}},
		{alice, l.FencingToken, []fileEdit{put("src/a.go", "a2"), del("src/b.go"), put("src/c/d.go", "d1")}},
		{alice, l.FencingToken, []fileEdit{del("src/a.go"), del("src/c/d.go")}},
		{bob, lb.FencingToken, []fileEdit{del("docs/readme.md")}},
	}
	chain := []string{r.Mainline}
	for i, s := range steps {
		b.clk.Advance(time.Second)
		head := chain[len(chain)-1]
		c := b.mustIntegrate(t, integrateParams("web", head, s.holder, []uint64{s.token}, s.edits...))
		for _, e := range s.edits {
			if e.delete {
				delete(files, e.path)
			} else {
				files[e.path] = e.content
			}
		}
		rev := b.revision(t, "web", c.IntegratedRevision)
		want := treeOf(files)
		assertFields(t, fmt.Sprintf("revision of step %d", i), rev, store.Revision{
			ID: c.IntegratedRevision, Repository: "web", Parent: head, ChangeID: c.ID, Holder: s.holder,
			Tree: want, TreeDigest: want.Digest(), GitTree: gitTreeOf(t, files), GitCommit: rev.GitCommit, CreatedAt: b.clk.Now(),
		})
		b.wantCommit(t, rev, c.Message, tokensTrailer(s.token))
		chain = append(chain, rev.ID)
	}
	if b.repository(t, "web").Mainline != chain[len(chain)-1] {
		t.Fatalf("the mainline is not the last revision")
	}
	// The last tree is empty again: the same digest as the first revision's.
	last := b.revision(t, "web", chain[len(chain)-1])
	if len(last.Tree) != 0 || last.TreeDigest != b.revision(t, "web", r.Mainline).TreeDigest {
		t.Fatalf("the last revision = %v (%s), want the empty tree", last.Tree, last.TreeDigest)
	}
	// Every blob an edit sent is stored.
	for _, content := range []string{"a1", "b1", "hello", "a2", "d1"} {
		if got, err := b.rs.GetBlob(b.ctx, repo.Digest([]byte(content))); err != nil || string(got.Content) != content {
			t.Fatalf("GetBlob(%q) = %q, %v", content, got.Content, err)
		}
	}
}
