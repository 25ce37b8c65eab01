package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/server"
	"github.com/ag-coord/ag/internal/testutil/agtest"
	"github.com/ag-coord/ag/internal/testutil/syncbuf"
)

// TestRequestsAreLoggedAtDebug ensures the server logs each request at DEBUG, a request that
// succeeded and one answered not_found alike, so that at its default level (INFO) it logs none;
// an internal error or an unreachable database is still logged at WARN or ERROR, without its
// details reaching the client, and every request is still counted in the latency metric.
func TestRequestsAreLoggedAtDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			st := agtest.OpenStore(t, "sqlite", nil)
			token, _, err := server.Bootstrap(context.Background(), st, "")
			if err != nil {
				t.Fatal(err)
			}
			var logs syncbuf.Buffer
			srv := server.New(server.Config{Store: st, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))})
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			c := client.New(hs.URL, token, client.WithRetries(0, 0))
			ctx := context.Background()

			if _, err := c.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{}); err != nil {
				t.Fatalf("ListJobs: %v", err)
			}
			if _, err := c.Jobs.GetJob(ctx, &agwpv1.GetJobRequest{JobId: "job_nosuch"}); !client.IsCode(err, connect.CodeNotFound) {
				t.Fatalf("GetJob of no job: %v, want not_found", err)
			}
			ok := logs.Lines("msg=rpc", "procedure=/agwp.v1.JobService/ListJobs", "code=ok")
			notFound := logs.Lines("msg=rpc", "procedure=/agwp.v1.JobService/GetJob", "code=not_found")
			switch level {
			case slog.LevelInfo:
				if all := logs.Lines("msg=rpc"); len(all) != 0 {
					t.Errorf("at INFO the server logged requests:\n%s", strings.Join(all, "\n"))
				}
			case slog.LevelDebug:
				if len(ok) != 1 || !strings.Contains(ok[0], "level=DEBUG") || !strings.Contains(ok[0], "principal=admin") ||
					len(notFound) != 1 || !strings.Contains(notFound[0], "level=DEBUG") || !strings.Contains(notFound[0], "err=") {
					t.Errorf("at DEBUG: the request lines are\n%s\n%s\nwant one DEBUG line each, with the principal and the error", ok, notFound)
				}
			}

			res, err := http.Get(hs.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			for _, want := range []string{
				`ag_request_duration_seconds_count{code="ok",procedure="/agwp.v1.JobService/ListJobs"} 1`,
				`ag_request_duration_seconds_count{code="not_found",procedure="/agwp.v1.JobService/GetJob"} 1`,
			} {
				if !strings.Contains(string(body), want) {
					t.Errorf("/metrics lacks %s:\n%s", want, body)
				}
			}

			// The database goes away: the server must say so at WARN or ERROR, whatever the
			// level, and tell the client nothing of the database.
			st.Close()
			_, err = c.Jobs.ListJobs(ctx, &agwpv1.ListJobsRequest{})
			if err == nil || strings.Contains(err.Error(), "sql") || strings.Contains(err.Error(), "closed") {
				t.Errorf("ListJobs over a closed store: %v, want an error without the database's details", err)
			}
			failed := logs.Lines("msg=rpc", "procedure=/agwp.v1.JobService/ListJobs", "code=")
			last := ""
			if len(failed) > 0 {
				last = failed[len(failed)-1]
			}
			if !strings.Contains(last, "level=WARN") && !strings.Contains(last, "level=ERROR") {
				t.Errorf("the failed request was logged as %q, want a WARN or ERROR line", last)
			}
		})
	}
}
