package repoview

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

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
	termsafe.Fprintf(tw, "mainline\t%s\n", repo.GetMainline())
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
