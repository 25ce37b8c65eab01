package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// headerLog records the Accept-Encoding of each request and the Content-Encoding of each answer.
type headerLog struct {
	accepted, encoded []string
}

func (h *headerLog) RoundTrip(req *http.Request) (*http.Response, error) {
	h.accepted = append(h.accepted, req.Header.Get("Accept-Encoding"))
	res, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		h.encoded = append(h.encoded, res.Header.Get("Content-Encoding"))
	}
	return res, err
}

// TestAnswersAreCompressedOnlyForClientsThatAreNotLocal ensures a large answer is gzipped for a
// client that asks for it, and that the Go SDK does not ask when the server is on its own
// machine, where compressing costs both ends CPU and saves nothing.
func TestAnswersAreCompressedOnlyForClientsThatAreNotLocal(t *testing.T) {
	ctx := context.Background()
	srv := agtest.Start(t, agtest.Options{})
	for range 300 {
		enqueue(t, srv.Admin, "ag.noop")
	}

	// A client that asks for gzip, as one across a network does, gets it.
	req, _ := proto.Marshal(&agwpv1.ListJobsRequest{PageSize: 300})
	r, _ := http.NewRequest(http.MethodPost, srv.URL+"/agwp.v1.JobService/ListJobs", bytes.NewReader(req))
	r.Header = http.Header{"Content-Type": {"application/proto"}, "Accept-Encoding": {"gzip"}, "Authorization": {"Bearer " + srv.AdminToken}}
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("ListJobs of 300 jobs asking for gzip: HTTP %d, Content-Encoding %q", res.StatusCode, res.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the gzip answer does not inflate: %v", err)
	}
	var listed agwpv1.ListJobsResponse
	if err := proto.Unmarshal(body, &listed); err != nil || len(listed.GetJobs()) != 300 {
		t.Fatalf("the inflated answer: %d jobs, %v; want 300", len(listed.GetJobs()), err)
	}

	// The SDK on the server's own machine asks for none and gets the same answer plain.
	log := &headerLog{}
	c := client.New(srv.URL, srv.AdminToken, client.WithHTTPClient(&http.Client{Transport: log}))
	claims, err := c.ClaimMany(ctx, client.ClaimOptions{Worker: "w", Lease: time.Minute}, 256)
	if err != nil || len(claims) != 256 {
		t.Fatalf("claim 256: %d claims, %v", len(claims), err)
	}
	if len(log.accepted) != 1 || log.accepted[0] != "identity" || log.encoded[0] != "" {
		t.Fatalf("the local SDK's claim: Accept-Encoding %q, answered with Content-Encoding %q; want identity and none", log.accepted, log.encoded)
	}
}
