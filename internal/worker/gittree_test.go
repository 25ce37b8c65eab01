package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/go-git/go-git/v5/storage/memory"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/agwp/v1/agwpv1connect"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/gitstore"
	"github.com/ag-coord/ag/internal/repo"
)

// sampleFiles is a candidate's files, with directories at several depths, a name that sorts
// differently as a file and as a directory ("a.go" beside "a"), and an empty file.
var sampleFiles = map[string]string{
	"a.go":          "package a\n",
	"a/b.go":        "package b\n",
	"deep/er/c.txt": "",
	"deep/d.go":     "package a\n", // the same blob as a.go
	"z":             strings.Repeat("z", 70_000),
}

// treeOf answers the ag tree of files, with each content put into v's blob cache.
func treeOf(t *testing.T, v *Validator, files map[string]string) repo.Tree {
	t.Helper()
	tree := make(repo.Tree, 0, len(files))
	for p, content := range files {
		tree = append(tree, repo.Entry{Path: p, Digest: cachedBlob(t, v, content), Size: uint64(len(content))})
	}
	sort.Slice(tree, func(i, j int) bool { return tree[i].Path < tree[j].Path })
	return tree
}

// gitTreeOf answers the git tree id of files as internal/gitstore stores them.
func gitTreeOf(t *testing.T, files map[string]string) string {
	t.Helper()
	contents := make(map[string][]byte, len(files))
	for p, c := range files {
		contents[p] = []byte(c)
	}
	id, err := gitstore.WriteFiles(memory.NewStorage(), contents)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// TestMaterializeAnswersTheGitTree ensures materialize answers the git tree id of the files it
// wrote: the id internal/gitstore gives the same files, and the one git itself writes for the
// checkout.
func TestMaterializeAnswersTheGitTree(t *testing.T) {
	t.Parallel()
	v := &Validator{CacheDir: t.TempDir()}
	root := t.TempDir()
	got, err := v.materialize(context.Background(), root, treeOf(t, v, sampleFiles))
	if err != nil {
		t.Fatalf("materialize: %v", err)
	}
	if want := gitTreeOf(t, sampleFiles); got != want {
		t.Errorf("git tree = %s, want gitstore's %s", got, want)
	}
	if empty, err := v.materialize(context.Background(), t.TempDir(), nil); err != nil || empty != gitstore.EmptyTree.String() {
		t.Errorf("git tree of no files = %s, %v; want git's empty tree %s", empty, err, gitstore.EmptyTree)
	}

	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to compare the tree with git's own: %v", err)
	}
	gitCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitCmd("init", "-q")
	gitCmd("add", "-A")
	if want := gitCmd("write-tree"); got != want {
		t.Errorf("git tree = %s, git write-tree says %s", got, want)
	}
}

// TestMaterializeRefusesABlobOfAnotherSize ensures a tree entry whose size is not its blob's is
// refused: the git blob id hashes the entry's size.
func TestMaterializeRefusesABlobOfAnotherSize(t *testing.T) {
	t.Parallel()
	v := &Validator{CacheDir: t.TempDir()}
	d := cachedBlob(t, v, "four")
	for _, size := range []uint64{3, 5, 1 << 63} {
		if _, err := v.materialize(context.Background(), t.TempDir(), repo.Tree{{Path: "f", Digest: d, Size: size}}); err == nil {
			t.Errorf("materialize accepted size %d for a blob of 4 bytes", size)
		}
	}
}

// fakeRepos answers one revision's tree and the blobs of a map, as a server would to the
// worker holding its validate job.
type fakeRepos struct {
	agwpv1connect.UnimplementedRepositoryServiceHandler
	revision   string
	tree       repo.Tree
	treeDigest string // what the server says the tree's digest is
	blobs      map[string][]byte
}

func (f *fakeRepos) GetTree(_ context.Context, req *agwpv1.GetTreeRequest) (*agwpv1.GetTreeResponse, error) {
	if req.GetRevision() != f.revision {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such revision"))
	}
	res := &agwpv1.GetTreeResponse{Revision: f.revision, TreeDigest: f.treeDigest}
	for _, e := range f.tree {
		res.Entries = append(res.Entries, &agwpv1.TreeEntry{Path: e.Path, Digest: e.Digest, Size: e.Size})
	}
	return res, nil
}

func (f *fakeRepos) GetBlob(_ context.Context, req *agwpv1.GetBlobRequest) (*agwpv1.GetBlobResponse, error) {
	b, ok := f.blobs[req.GetDigest()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such blob"))
	}
	return &agwpv1.GetBlobResponse{Content: b, Digest: req.GetDigest()}, nil
}

func (f *fakeRepos) GetBlobs(_ context.Context, req *agwpv1.GetBlobsRequest, stream *connect.ServerStream[agwpv1.GetBlobsResponse]) error {
	for _, d := range req.GetDigests() {
		b, ok := f.blobs[d]
		if !ok {
			return connect.NewError(connect.CodeNotFound, errors.New("blob "+d+": not found"))
		}
		if err := stream.Send(&agwpv1.GetBlobsResponse{Blobs: []*agwpv1.BlobContent{{Digest: d, Content: b}}}); err != nil {
			return err
		}
	}
	return nil
}

// TestHandleAttestsTheGitTree ensures a validator runs the command only on a checkout whose git
// tree id and tree digest are those the job names (when it names them), and signs both, computed
// from the files it wrote, whichever the job names.
func TestHandleAttestsTheGitTree(t *testing.T) {
	t.Parallel()
	needUnix(t)
	repos := &fakeRepos{revision: "rev_1", blobs: map[string][]byte{}}
	for p, content := range sampleFiles {
		d := digestOf([]byte(content))
		repos.blobs[d] = []byte(content)
		repos.tree = append(repos.tree, repo.Entry{Path: p, Digest: d, Size: uint64(len(content))})
	}
	sort.Slice(repos.tree, func(i, j int) bool { return repos.tree[i].Path < repos.tree[j].Path })
	treeDigest, gitTree := repos.tree.Digest(), gitTreeOf(t, sampleFiles)
	otherTree, otherGitTree := "sha256:"+strings.Repeat("ab", 32), strings.Repeat("0", 39)+"1"

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name             string
		treeDigest       string // the job's
		gitTree          string // the job's
		serverTreeDigest string // what GetTree says
		wantErr          string // "" to run and attest
	}{
		{"both named", treeDigest, gitTree, treeDigest, ""},
		{"the git tree alone", "", gitTree, treeDigest, ""},
		{"the tree digest alone", treeDigest, "", treeDigest, ""}, // a job enqueued before git tree ids
		{"the git tree alone, a server that names no digest", "", gitTree, "", ""},
		{"another git tree", treeDigest, otherGitTree, treeDigest, "make git tree " + gitTree + ", but the job validates git tree " + otherGitTree},
		{"another git tree alone", "", otherGitTree, treeDigest, "but the job validates git tree " + otherGitTree},
		{"another tree digest", otherTree, gitTree, treeDigest, "but the job validates tree " + otherTree},
		{"a server digest that is not its entries'", "", gitTree, otherTree, "not to the tree " + otherTree + " it named"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := *repos
			fake.treeDigest = c.serverTreeDigest
			mux := http.NewServeMux()
			mux.Handle(agwpv1connect.NewRepositoryServiceHandler(&fake))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			v := &Validator{
				Client: client.New(srv.URL, "t"), Signer: attest.NewSigner(priv), CacheDir: t.TempDir(), WorkDir: t.TempDir(),
				Unsandboxed: true,
			}
			marker := filepath.Join(t.TempDir(), "ran")
			payload := map[string]any{
				"repository": "app", "change": "chg_1", "candidate_revision": "rev_1",
				// The command sees the checkout it attests.
				"command": []any{"sh", "-c", `test "$(cat a/b.go)" = "package b" && touch "$MARKER"`}, "timeout": "1m",
				"env": map[string]any{"MARKER": marker},
			}
			if c.treeDigest != "" {
				payload["tree_digest"] = c.treeDigest
			}
			if c.gitTree != "" {
				payload["git_tree"] = c.gitTree
			}
			s, err := structpb.NewStruct(payload)
			if err != nil {
				t.Fatal(err)
			}
			job := &Job{Job: &agwpv1.Job{Id: "job_1", Kind: client.KindValidate, Payload: s, Attempts: 1, ClaimedBy: "ci|w1"}}
			out, err := v.Handle(context.Background(), job)
			_, statErr := os.Stat(marker)
			if c.wantErr != "" {
				var perm permanentError
				if !errors.As(err, &perm) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Handle = %v, want a permanent error: %s", err, c.wantErr)
				}
				if statErr == nil {
					t.Error("the command ran on a tree that is not the job's")
				}
				return
			}
			if err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if statErr != nil {
				t.Fatalf("the command did not run, or not in the checkout: %v\n%s", statErr, out.Output)
			}
			got, _, err := attest.VerifyValidation(context.Background(), attest.FromProto(out.Attestation), [][]byte{pub})
			if err != nil {
				t.Fatalf("verify the attestation: %v", err)
			}
			if got.GitTree != gitTree || got.TreeDigest != treeDigest || !got.Passed() || got.Revision != "rev_1" || got.JobID != "job_1" {
				t.Errorf("attestation = %+v, want PASSED for git tree %s, tree %s", got, gitTree, treeDigest)
			}
		})
	}
}
