package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestEdgeCountsALargeUploadByWhatItMayCarry holds which calls take one of a principal's upload
// slots: a call carrying file contents declaring over 1 MiB, of no declared size, or compressed
// in any protocol's way; not one of exactly 1 MiB, nor one sent as it is ("identity"), nor any
// call that carries no contents.
func TestEdgeCountsALargeUploadByWhatItMayCarry(t *testing.T) {
	t.Parallel()
	const upload, claim = "/agwp.v1.RepositoryService/UploadBlobs", "/agwp.v1.JobService/ClaimJob"
	request := func(size int64, header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, upload, nil)
		r.ContentLength = size
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	for _, tc := range []struct {
		name      string
		procedure string
		r         *http.Request
		large     bool
	}{
		{"1 MiB", upload, request(largeBodyBytes), false},
		{"1 MiB and a byte", upload, request(largeBodyBytes + 1), true},
		{"no declared size", upload, request(-1), true},
		{"empty", upload, request(0), false},
		{"gzip", upload, request(100, "Content-Encoding", "gzip"), true},
		{"Connect's gzip", upload, request(100, "Connect-Content-Encoding", "gzip"), true},
		{"gRPC's gzip", upload, request(100, "Grpc-Encoding", "gzip"), true},
		{"identity", upload, request(100, "Content-Encoding", "identity", "Grpc-Encoding", "identity"), false},
		{"a claim of no declared size", claim, request(-1), false},
		{"a claim of 2 MiB, compressed", claim, request(2<<20, "Content-Encoding", "gzip"), false},
		{"an integrate of 2 MiB", "/agwp.v1.RepositoryService/Integrate", request(2 << 20), true},
		{"a part of 2 MiB", "/agwp.v1.RepositoryService/UploadBlobPart", request(2 << 20), true},
		{"git objects, 2 MiB", "/agwp.v1.RepositoryService/UploadGitObjects", request(2 << 20), true},
	} {
		if got := largeUpload(tc.procedure, tc.r); got != tc.large {
			t.Errorf("%s: a large upload: %v, want %v", tc.name, got, tc.large)
		}
	}
}

// TestEdgeGivesAnUploadSlotBackWhenItsUploadEnds holds the count of a principal's large uploads:
// at most its limit at once, each slot given back when its upload ends, so that the principal
// can upload again, and nothing kept of a principal with none in flight.
func TestEdgeGivesAnUploadSlotBackWhenItsUploadEnds(t *testing.T) {
	t.Parallel()
	u := &uploadSlots{limit: 2, held: map[string]int{}}
	first, ok1 := u.take("mallory")
	second, ok2 := u.take("mallory")
	if !ok1 || !ok2 {
		t.Fatalf("mallory's first two uploads: %v, %v; want both taken", ok1, ok2)
	}
	if _, ok := u.take("mallory"); ok {
		t.Fatalf("mallory's third upload at once was taken")
	}
	if _, ok := u.take("alice"); !ok {
		t.Fatalf("alice's upload was held back by mallory's")
	}
	first()
	third, ok := u.take("mallory")
	if !ok {
		t.Fatalf("mallory's upload after one ended was refused")
	}
	if _, ok := u.take("mallory"); ok {
		t.Fatalf("a third upload at once was taken after one slot came back")
	}
	second()
	third()
	if n, kept := u.held["mallory"]; kept {
		t.Errorf("mallory has no upload in flight, and %d are counted", n)
	}
	if _, ok := u.take("mallory"); !ok {
		t.Errorf("mallory's upload after all ended was refused")
	}
}
