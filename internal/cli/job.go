package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/structjson"
	"github.com/ag-coord/ag/internal/termsafe"
)

func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "job", Short: "enqueue, list, show and cancel jobs"}
	cmd.AddCommand(newJobEnqueueCmd(g), newJobListCmd(g), newJobShowCmd(g), newJobCancelCmd(g))
	return cmd
}

func newJobEnqueueCmd(g *globals) *cobra.Command {
	var (
		payload     string
		priority    int32
		maxAttempts uint32
		delay       time.Duration
		uniqueKey   string
	)
	cmd := &cobra.Command{
		Use:     "enqueue KIND",
		Short:   "enqueue a job",
		Example: `  ag job enqueue ag.noop --payload '{"ms": 200}'`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &agwpv1.EnqueueJobRequest{Kind: args[0], Priority: priority, MaxAttempts: maxAttempts, UniqueKey: uniqueKey}
			if payload != "" {
				s, err := structjson.Unmarshal([]byte(payload))
				if err != nil {
					return fmt.Errorf("--payload: not a JSON object: %v", err)
				}
				req.Payload = s
			}
			if delay != 0 {
				req.Delay = durationpb.New(delay)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Jobs.EnqueueJob(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			verb := "enqueued"
			if res.GetExisting() {
				verb = "already enqueued (same unique key)"
			}
			termPrintf(g.stdout, "%s %s (%s, %s)\n", verb, res.GetJob().GetId(), res.GetJob().GetKind(), checkout.JobStateName(res.GetJob().GetState()))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "job payload, a JSON object")
	f.Int32Var(&priority, "priority", 0, "higher runs first")
	f.Uint32Var(&maxAttempts, "max-attempts", 0, "claims allowed before the job fails for good (default 5)")
	f.DurationVar(&delay, "delay", 0, "run no sooner than this from now")
	f.StringVar(&uniqueKey, "unique-key", "", "do not enqueue again while a job with this key is unfinished")
	return cmd
}

func newJobListCmd(g *globals) *cobra.Command {
	var (
		states []string
		kinds  []string
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &agwpv1.ListJobsRequest{Kinds: kinds}
			for _, s := range states {
				v, ok := checkout.ParseJobState(s)
				if !ok {
					return fmt.Errorf("--state %q: use queued, claimed, completed, failed or cancelled", s)
				}
				req.States = append(req.States, v)
			}
			if limit <= 0 {
				return fmt.Errorf("--limit %d: must be positive", limit)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			out, err := checkout.ListJobs(cmd.Context(), c, req, limit)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tSTATE\tATTEMPTS\tCLAIMED BY\tUPDATED\tNOTE")
			for _, j := range out.GetJobs() {
				termPrintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.GetId(), j.GetKind(), checkout.JobStateName(j.GetState()),
					j.GetAttempts(), j.GetMaxAttempts(), dash(j.GetClaimedBy()), formatTime(j.GetUpdatedAt()), note(j))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.GetNextPageToken() != "" {
				fmt.Fprintf(g.stdout, "(more jobs: raise --limit)\n")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only jobs in these states (queued, claimed, completed, failed, cancelled)")
	f.StringSliceVar(&kinds, "kind", nil, "only jobs of these kinds")
	f.IntVar(&limit, "limit", 50, "at most this many jobs")
	return cmd
}

func newJobShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show JOB_ID",
		Short: "show one job",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Jobs.GetJob(cmd.Context(), &agwpv1.GetJobRequest{JobId: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			printJob(g, res.GetJob())
			return nil
		},
	}
}

func newJobCancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel JOB_ID",
		Short: "cancel a job (a claimed job is asked to stop at its next heartbeat)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Jobs.CancelJob(cmd.Context(), &agwpv1.CancelJobRequest{JobId: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			j := res.GetJob()
			if j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED {
				termPrintf(g.stdout, "cancel requested for %s: %s will stop it at its next heartbeat\n", j.GetId(), j.GetClaimedBy())
			} else {
				termPrintf(g.stdout, "%s is %s\n", j.GetId(), checkout.JobStateName(j.GetState()))
			}
			return nil
		},
	}
}

func printJob(g *globals, j *agwpv1.Job) {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			termPrintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", j.GetId())
	row("kind", j.GetKind())
	row("state", checkout.JobStateName(j.GetState()))
	if j.GetCancelRequested() {
		row("cancel", "requested")
	}
	row("priority", fmt.Sprint(j.GetPriority()))
	row("attempts", fmt.Sprintf("%d of %d", j.GetAttempts(), j.GetMaxAttempts()))
	row("claimed by", j.GetClaimedBy())
	if j.GetLeaseExpiresAt() != nil {
		row("lease until", formatTime(j.GetLeaseExpiresAt()))
	}
	row("progress", j.GetProgress())
	row("enqueued by", j.GetEnqueuedBy())
	row("unique key", j.GetUniqueKey())
	row("created", formatTime(j.GetCreatedAt()))
	row("run after", formatTime(j.GetRunAfter()))
	row("updated", formatTime(j.GetUpdatedAt()))
	row("finished", formatTime(j.GetFinishedAt()))
	row("last error", j.GetLastError())
	if j.GetPayload() != nil {
		b, _ := json.Marshal(j.GetPayload().AsMap())
		row("payload", string(b))
	}
	if j.GetResult() != nil {
		b, _ := json.Marshal(j.GetResult().AsMap())
		row("result", string(b))
	}
	row("attestation", j.GetAttestationDigest())
	row("output digest", j.GetOutputDigest())
	_ = tw.Flush()
	if out := termsafe.Text(j.GetOutput()); out != "" {
		fmt.Fprintf(g.stdout, "output:\n%s", out)
		if !strings.HasSuffix(out, "\n") {
			fmt.Fprintln(g.stdout)
		}
	}
}

func formatTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func note(j *agwpv1.Job) string {
	switch {
	case j.GetCancelRequested() && j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED:
		return "cancel requested"
	case j.GetState() == agwpv1.JobState_JOB_STATE_CLAIMED && j.GetProgress() != "":
		return j.GetProgress()
	case j.GetLastError() != "":
		return termsafe.FirstLine(j.GetLastError(), 60)
	}
	return ""
}
