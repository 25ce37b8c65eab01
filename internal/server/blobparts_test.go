package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestBlobsInParts ensures, on both stores, that a blob sent in parts is stored once its digest
// is checked and reads back whole (GetBlob, ReadBlob from any offset); that an upload that
// stopped goes on where it stopped; that a part sent twice or out of order, parts of another
// content, and another principal's parts are refused or kept apart; and that a worker reads
// with ReadBlob only the blobs of a job it holds, as with GetBlob.
func TestBlobsInParts(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const part = 1 << 10
			srv := agtest.Start(t, agtest.Options{Backend: backend, BlobPartBytes: part})
			alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
			bob := srv.Principal(t, "bob", agwpv1.Role_ROLE_AGENT)
			worker := srv.Principal(t, "builder", agwpv1.Role_ROLE_WORKER)
			content := randomBytes(1, 3*part+300)
			digest := sha256Digest(content)
			size := uint64(len(content))

			// Two parts, then a stop.
			start, err := alice.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: digest, Size: size})
			if err != nil || start.GetStored() || start.GetReceived() != 0 || start.GetPartBytes() != part {
				t.Fatalf("start: %v, %v", start, err)
			}
			for i := range 2 {
				res, err := alice.Repos.UploadBlobPart(ctx, &agwpv1.UploadBlobPartRequest{
					UploadId: start.GetUploadId(), Offset: uint64(i * part), Content: content[i*part : (i+1)*part]})
				if err != nil || res.GetReceived() != uint64((i+1)*part) || res.GetDigest() != "" {
					t.Fatalf("part %d: %v, %v", i, res, err)
				}
			}
			_, err = alice.Repos.UploadBlobPart(ctx, &agwpv1.UploadBlobPartRequest{UploadId: start.GetUploadId(), Offset: 0, Content: content[:part]})
			wantCode(t, "the first part sent again", err, connect.CodeFailedPrecondition)
			if !strings.Contains(err.Error(), "send the part from 2048") {
				t.Fatalf("a part sent twice is refused with %q, which does not name the offset to send", err)
			}
			_, err = alice.Repos.UploadBlobPart(ctx, &agwpv1.UploadBlobPartRequest{UploadId: start.GetUploadId(), Offset: 2 * part, Content: content[2*part : 2*part+10]})
			wantCode(t, "a short part that is not the last", err, connect.CodeInvalidArgument)
			if _, err := alice.Blob(ctx, digest); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("an unfinished upload is readable: %v", err)
			}
			// Bob's upload of the same content is his own, from nothing.
			other, err := bob.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: digest, Size: size})
			if err != nil || other.GetReceived() != 0 {
				t.Fatalf("bob's start: %v, %v", other, err)
			}
			// Alice starts again and goes on from what the server holds.
			again, err := alice.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: digest, Size: size})
			if err != nil || again.GetReceived() != 2*part || again.GetUploadId() != start.GetUploadId() {
				t.Fatalf("start again: %v, %v", again, err)
			}
			if err := alice.UploadBlob(ctx, bytes.NewReader(content), int64(len(content)), digest); err != nil {
				t.Fatalf("upload the rest: %v", err)
			}
			if got, err := alice.Blob(ctx, digest); err != nil || !bytes.Equal(got, content) {
				t.Fatalf("GetBlob of the blob sent in parts: %d bytes, %v", len(got), err)
			}
			var buf bytes.Buffer
			if n, err := alice.ReadBlob(ctx, digest, &buf); err != nil || n != int64(len(content)) || !bytes.Equal(buf.Bytes(), content) {
				t.Fatalf("ReadBlob: %d bytes, %v", n, err)
			}
			for _, offset := range []uint64{0, 1, part - 1, part, 2*part + 7, size - 1, size} {
				got, err := readBlobFrom(ctx, alice, digest, offset)
				if err != nil || !bytes.Equal(got, content[offset:]) {
					t.Fatalf("ReadBlob from %d: %d bytes, %v", offset, len(got), err)
				}
			}
			_, err = readBlobFrom(ctx, alice, digest, size+1)
			wantCode(t, "ReadBlob past the end", err, connect.CodeOutOfRange)
			stored, err := bob.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: digest, Size: size})
			if err != nil || !stored.GetStored() {
				t.Fatalf("a start of a stored blob: %v, %v", stored, err)
			}

			// Parts of other content than the digest named: refused at the last part, and
			// the upload is dropped.
			forged := randomBytes(2, part+5)
			claimed := sha256Digest(randomBytes(3, part+5))
			err = alice.UploadBlob(ctx, bytes.NewReader(forged), int64(len(forged)), claimed)
			wantCode(t, "parts that make another digest", err, connect.CodeInvalidArgument)
			if _, err := alice.Blob(ctx, claimed); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("parts of other content were stored under the digest named: %v", err)
			}
			if res, err := alice.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: claimed, Size: uint64(len(forged))}); err != nil || res.GetReceived() != 0 {
				t.Fatalf("the refused upload was not dropped: %v, %v", res, err)
			}

			// Bad input.
			_, err = alice.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: "sha256:nope", Size: 1})
			wantCode(t, "a start with a bad digest", err, connect.CodeInvalidArgument)
			_, err = alice.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: claimed, Size: 1 << 40})
			wantCode(t, "a start of a blob above the largest", err, connect.CodeResourceExhausted)
			_, err = alice.Repos.UploadBlobPart(ctx, &agwpv1.UploadBlobPartRequest{UploadId: "../../etc", Content: []byte("x")})
			wantCode(t, "a part of no upload", err, connect.CodeInvalidArgument)
			unstarted := randomBytes(5, 10)
			_, err = alice.Repos.UploadBlobPart(ctx, &agwpv1.UploadBlobPartRequest{
				UploadId: strings.TrimPrefix(sha256Digest(unstarted), "sha256:") + "-10", Content: unstarted})
			wantCode(t, "a part of an upload nobody started", err, connect.CodeFailedPrecondition)
			if !strings.Contains(err.Error(), "start it with StartBlobUpload") {
				t.Fatalf("a part of an upload nobody started is refused with %q, which does not say to start it", err)
			}
			// An empty blob goes in no part at all, and is stored.
			if err := alice.UploadBlob(ctx, bytes.NewReader(nil), 0, sha256Digest(nil)); err != nil {
				t.Fatalf("upload an empty blob: %v", err)
			}
			if got, err := alice.Blob(ctx, sha256Digest(nil)); err != nil || len(got) != 0 {
				t.Fatalf("GetBlob of the empty blob: %q, %v", got, err)
			}
			_, err = worker.Repos.StartBlobUpload(ctx, &agwpv1.StartBlobUploadRequest{Digest: digest, Size: size})
			wantCode(t, "a worker starts an upload", err, connect.CodePermissionDenied)

			// A worker holds no job: ReadBlob, like GetBlob, answers it nothing.
			_, err = worker.ReadBlob(ctx, digest, &buf)
			wantCode(t, "a worker reads with ReadBlob a blob of no job it holds", err, connect.CodePermissionDenied)
		})
	}
}

func readBlobFrom(ctx context.Context, c *client.Client, digest string, offset uint64) ([]byte, error) {
	stream, err := c.Repos.ReadBlob(ctx, &agwpv1.ReadBlobRequest{Digest: digest, Offset: offset})
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var out []byte
	for stream.Receive() {
		out = append(out, stream.Msg().GetContent()...)
	}
	return out, stream.Err()
}

// TestAFileLargerThanOneRequestLandsAndClones ensures that a file above what one request may
// carry (64 MiB of content) is integrated, not refused: the client sends it in parts, GetBlob
// says to read it with ReadBlob, ReadBlob answers it whole, and `git clone` from ag gets it
// (the pack streams it) with git's own blob id.
func TestAFileLargerThanOneRequestLandsAndClones(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed")
	}
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{})
	createRepo(t, srv, "app")
	alice := srv.Principal(t, "alice", agwpv1.Role_ROLE_AGENT)
	reader := srv.Principal(t, "reader", agwpv1.Role_ROLE_READER)
	big := randomBytes(4, 72<<20+3)
	l := acquire(t, alice, "app", "w1", 0, "big.bin")
	repo, err := alice.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := alice.IntegrateFiles(ctx, client.IntegrateOptions{
		Repository: "app", BaseRevision: repo.GetRepository().GetMainline(), Holder: "w1",
		FencingTokens: []uint64{l.GetFencingToken()}, Message: "Add a 72 MiB file",
		Changes: []client.FileChange{{Path: "big.bin", Content: big}},
	})
	if err != nil || ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
		t.Fatalf("integrate a 72 MiB file: %v, %v", ch, err)
	}
	digest := sha256Digest(big)
	_, err = alice.Repos.GetBlob(ctx, &agwpv1.GetBlobRequest{Digest: digest})
	wantCode(t, "GetBlob of a blob above one answer", err, connect.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "ReadBlob") {
		t.Fatalf("GetBlob's refusal %q does not say to use ReadBlob", err)
	}
	var read bytes.Buffer
	if n, err := reader.ReadBlob(ctx, digest, &read); err != nil || n != int64(len(big)) || !bytes.Equal(read.Bytes(), big) {
		t.Fatalf("ReadBlob of the 72 MiB blob: %d bytes, %v", n, err)
	}

	cloner, err := srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "cloner", Role: agwpv1.Role_ROLE_READER})
	if err != nil {
		t.Fatal(err)
	}
	token := cloner.GetToken()
	dir := filepath.Join(t.TempDir(), "clone")
	git := exec.Command("git", "-c", "http.extraHeader=Authorization: Bearer "+token, "clone", "-q", srv.URL+"/git/app.git", dir)
	git.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "big.bin"))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the clone's big.bin: %d bytes, %v", len(got), err)
	}
	fsck := exec.Command("git", "-C", dir, "fsck", "--strict")
	if out, err := fsck.CombinedOutput(); err != nil {
		t.Fatalf("git fsck --strict: %v\n%s", err, out)
	}
}
