package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/store"
)

// TestOverlapLookupsSearchTheIndex ensures that finding the leases that overlap a path
// searches lease_paths_overlap for the path, its ancestors and the range under a directory,
// and never scans the repository's lease paths or leases, however many there are.
func TestOverlapLookupsSearchTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, filepath.Join(t.TempDir(), "ag.db"), store.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer d.Close()
	if _, err := d.CreateRepository(ctx, store.CreateRepositoryParams{Name: "web", CreatedBy: "admin"}); err != nil {
		t.Fatalf("CreateRepository: %v", err)
	}
	for i := range 200 {
		if _, err := d.AcquireLease(ctx, store.AcquireLeaseParams{Repository: "web", Holder: fmt.Sprintf("p|w%d", i),
			Paths: []string{fmt.Sprintf("src/%d/", i), fmt.Sprintf("lib/%d.go", i)}, TTL: time.Minute}); err != nil {
			t.Fatalf("AcquireLease: %v", err)
		}
	}
	conds := map[string][]any{
		"acquire":   {liveOnly + `l.state = 'active' AND l.expires_at > ? AND l.holder <> ?`, int64(0), "p|x"},
		"supersede": {`lp.token > ?`, int64(3)},
	}
	for _, p := range []string{"a.go", "src/1/x/y.go", "src/", "src/1/", "top/"} {
		for name, c := range conds {
			q, args := overlapQuery("web", p, c[0].(string), c[1:], name == "acquire")
			rows, err := d.r.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, args...)
			if err != nil {
				t.Fatalf("explain the %s lookup of %q: %v", name, p, err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			rows.Close()
			all := strings.Join(plan, "\n")
			if strings.Contains(all, "SCAN lp") || strings.Contains(all, "SCAN l ") || strings.HasSuffix(all, "SCAN l") ||
				!strings.Contains(all, "SEARCH lp USING INDEX lease_paths_") {
				t.Fatalf("the %s lookup of %q does not only search the index:\n%s", name, p, all)
			}
			if want := map[string]string{"acquire": "lease_paths_live", "supersede": "lease_paths_overlap"}[name]; !strings.Contains(all, want) {
				t.Fatalf("the %s lookup of %q does not search %s:\n%s", name, p, want, all)
			}
		}
	}
}
