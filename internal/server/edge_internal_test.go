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
