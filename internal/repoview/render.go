package repoview

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/types/known/timestamppb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/termsafe"
)

// WriteSummary writes what `ag repo show` says of a repository, one fact a line, every string
// the server or an agent wrote made safe for a terminal.
func WriteSummary(w io.Writer, s *Summary) error {
	repo, tree, change := s.Repository.GetRepository(), s.Tree, s.LastChange
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	termsafe.Fprintf(tw, "repository\t%s\n", repo.GetName())
	if shallow := repo.GetShallow(); len(shallow) > 0 {
		// Imported from a shallow clone: what came before these commits is not ag's to serve.
		termsafe.Fprintf(tw, "mainline\t%s (history from %s on)\n", repo.GetMainline(), strings.Join(shallow, ", "))
	} else {
		termsafe.Fprintf(tw, "mainline\t%s\n", repo.GetMainline())
	}
	termsafe.Fprintf(tw, "tree\t%s (%s)\n", tree.GetTreeDigest(), DescribeEntries(tree.GetEntries()))
	for _, e := range tree.GetEntries() {
		if e.GetMode() == "160000" {
			// Another repository's commit, which ag neither holds nor checks out: name it,
			// as git's own `git submodule status` would.
			termsafe.Fprintf(tw, "submodule\t%s at %s\n", e.GetPath(), e.GetGitlinkCommit())
		}
	}
	if change != nil {
		termsafe.Fprintf(tw, "last change\t%s by %s: %s\n", change.GetId(), change.GetAuthor(), checkout.FirstLineOf(change.GetMessage()))
		if d := change.GetAttestationDigest(); d != "" {
			termsafe.Fprintf(tw, "attestation\t%s (ag attestation get %s)\n", d, d)
		} else {
			fmt.Fprintf(tw, "attestation\tnone: integrated without validation\n")
		}
	}
	if v := repo.GetValidation(); v != nil {
		termsafe.Fprintf(tw, "validation\t%s\n", DescribePolicy(v))
	} else {
		fmt.Fprintf(tw, "validation\tnone: changes integrate at once\n")
	}
	if m := repo.GetMirror(); m != nil {
		termsafe.Fprintf(tw, "forge mirror\t%s\n", DescribeMirror(m))
	}
	return tw.Flush()
}

// DescribeMirror says where a forge mirror stands, in one line: a diverged or failing one with
// its reason.
func DescribeMirror(m *agwpv1.Mirror) string {
	at := m.GetUrl() + " (" + m.GetBranch() + ")"
	switch m.GetState() {
	case agwpv1.MirrorState_MIRROR_STATE_CURRENT:
		return at + ": current at " + m.GetPushedCommit()
	case agwpv1.MirrorState_MIRROR_STATE_DIVERGED:
		return at + ": diverged: " + m.GetLastError()
	case agwpv1.MirrorState_MIRROR_STATE_FAILING:
		return at + ": failing: " + m.GetLastError()
	}
	return at + ": pending"
}

// WriteQueue writes a repository's integration queue: the candidates in flight, then the
// changes waiting to be built.
func WriteQueue(w io.Writer, q *agwpv1.GetQueueResponse) {
	termsafe.Fprintf(w, "queue: %s in flight, %s waiting (depth %d, batch %d)\n",
		Plural(len(q.GetCandidates()), "candidate"), Plural(len(q.GetWaiting()), "change"), q.GetDepth(), max(q.GetBatch(), 1))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(q.GetCandidates()) > 0 {
		// A LANE column only for a queue with lanes: "-" is the whole tree.
		lanes := slices.ContainsFunc(q.GetCandidates(), func(c *agwpv1.Candidate) bool { return c.GetLane() != "" })
		header, row := "  #\tCANDIDATE\tSTATE\t", "  %d\t%s\t%s\t"
		if lanes {
			header, row = header+"LANE\t", row+"%s\t"
		}
		fmt.Fprintln(tw, header+"CHANGES\tON\tWORKER\tPROGRESS")
		for _, c := range q.GetCandidates() {
			cells := []any{c.GetPosition(), c.GetId(), checkout.CandidateStateName(c.GetState())}
			if lanes {
				cells = append(cells, dash(c.GetLane()))
			}
			cells = append(cells, strings.Join(c.GetChanges(), ","), c.GetParentRevision(), dash(strings.Join(c.GetWorkers(), ",")), dash(c.GetProgress()))
			termsafe.Fprintf(tw, row+"%s\t%s\t%s\t%s\n", cells...)
		}
	}
	if len(q.GetWaiting()) > 0 {
		fmt.Fprintln(tw, "  \tWAITING\tAUTHOR\tPATHS\tCREATED\tMESSAGE\t")
		for _, ch := range q.GetWaiting() {
			created := ""
			if t := ch.GetCreatedAt(); t != nil {
				created = t.AsTime().Local().Format("2006-01-02 15:04:05")
			}
			termsafe.Fprintf(tw, "  \t%s\t%s\t%d\t%s\t%s\t\n", ch.GetId(), ch.GetAuthor(), len(ch.GetPaths()), created,
				checkout.FirstLineOf(ch.GetMessage()))
		}
	}
	_ = tw.Flush()
}

// Plural answers "1 noun" or "n nouns".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteChange writes what `ag change show` says of a change, one fact a line, every string an
// agent or the server wrote made safe for a terminal.
func WriteChange(w io.Writer, ch *agwpv1.Change) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	termsafe.Fprintf(tw, "change\t%s\n", ch.GetId())
	termsafe.Fprintf(tw, "repository\t%s\n", ch.GetRepository())
	termsafe.Fprintf(tw, "state\t%s\n", checkout.ChangeStateName(ch.GetState()))
	termsafe.Fprintf(tw, "author\t%s\n", ch.GetAuthor())
	termsafe.Fprintf(tw, "message\t%s\n", checkout.FirstLineOf(ch.GetMessage()))
	termsafe.Fprintf(tw, "paths\t%s\n", strings.Join(ch.GetPaths(), ", "))
	termsafe.Fprintf(tw, "base\t%s\n", ch.GetBaseRevision())
	termsafe.Fprintf(tw, "candidate\t%s\n", dash(ch.GetCandidateRevision()))
	termsafe.Fprintf(tw, "integrated\t%s\n", dash(ch.GetIntegratedRevision()))
	if h := ch.GetHistory(); len(h) > 0 && h[len(h)-1].GetLane() != "" {
		// Its candidate is the lane's view of the tree, which is what the attestation is about.
		termsafe.Fprintf(tw, "lane\t%s\n", h[len(h)-1].GetLane())
	}
	termsafe.Fprintf(tw, "validate job\t%s\n", dash(ch.GetJobId()))
	termsafe.Fprintf(tw, "attestation\t%s\n", dash(ch.GetAttestationDigest()))
	if p := ch.GetProtectedPaths(); len(p) > 0 {
		termsafe.Fprintf(tw, "protected\t%s\n", strings.Join(p, ", "))
	}
	if by := ch.GetApprovedBy(); by != "" {
		termsafe.Fprintf(tw, "approved by\t%s, %s\n", by, formatTime(ch.GetApprovedAt()))
	} else if len(ch.GetProtectedPaths()) > 0 && !checkout.FinalChange(ch.GetState()) {
		termsafe.Fprintf(tw, "approved by\t- (a reviewer approves it: ag change approve %s)\n", ch.GetId())
	}
	termsafe.Fprintf(tw, "created\t%s\n", formatTime(ch.GetCreatedAt()))
	termsafe.Fprintf(tw, "updated\t%s\n", formatTime(ch.GetUpdatedAt()))
	if ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_QUEUED {
		termsafe.Fprintf(tw, "queue\t%s\n", strings.TrimSpace(strings.Trim(checkout.QueuePlace(ch), " ()")))
	}
	if c := ch.GetCandidate(); c != nil && ch.GetState() == agwpv1.ChangeState_CHANGE_STATE_VALIDATING {
		termsafe.Fprintf(tw, "in candidate\t%s\n", checkout.DescribeCandidate(c))
	}
	_ = tw.Flush()
	if ch.GetReason() != "" {
		fmt.Fprintf(w, "reason: %s\n", termsafe.Text(ch.GetReason()))
	}
	if h := ch.GetHistory(); len(h) > 1 || (len(h) == 1 && len(h[0].GetChanges()) > 1) {
		fmt.Fprintf(w, "validated %d times:\n", len(h))
		for _, c := range h {
			line := fmt.Sprintf("  %s  %s", c.GetId(), checkout.CandidateStateName(c.GetState()))
			var about []string
			if l := c.GetLane(); l != "" {
				about = append(about, "lane "+l)
			}
			if n := len(c.GetChanges()); n > 1 {
				about = append(about, fmt.Sprintf("a batch of %d", n))
			}
			if len(about) > 0 {
				line += " (" + strings.Join(about, ", ") + ")"
			}
			if r := c.GetReason(); r != "" && c.GetState() != agwpv1.CandidateState_CANDIDATE_STATE_REJECTED {
				line += ": " + checkout.FirstLineOf(r)
			}
			termsafe.Fprintf(w, "%s\n", line)
		}
	}
}

func formatTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05")
}
