//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpAgent is an agent that reaches ag only through `ag mcp`, started as a process in its
// checkout as an MCP host starts it, with its token in the environment.
type mcpAgent struct {
	name string
	dir  string
	cs   *mcp.ClientSession
}

func (g *gateEnv) mcpAgent(t *testing.T, name string) *mcpAgent {
	t.Helper()
	shell := g.agent(t, name) // the checkout, made once by whoever sets the agent up
	cmd := exec.Command(agBin, "mcp")
	cmd.Dir = shell.dir
	cmd.Env = cleanEnv("AG_TOKEN="+shell.token, "AG_SERVER="+g.URL)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-host", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to ag mcp for %s: %v", name, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return &mcpAgent{name: name, dir: shell.dir, cs: cs}
}

// call calls a tool and answers whether it was a tool error, its text, and its structured
// result decoded into out (when not nil).
func (a *mcpAgent) call(t *testing.T, tool string, args map[string]any, out any) (failed bool, text string) {
	t.Helper()
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %s: %v", a.name, tool, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %s: structured result %s: %v", a.name, tool, b, err)
		}
	}
	return res.IsError, text
}

func (a *mcpAgent) ok(t *testing.T, tool string, args map[string]any, out any) {
	t.Helper()
	if failed, text := a.call(t, tool, args, out); failed {
		t.Fatalf("%s: %s failed: %s", a.name, tool, text)
	}
}

func fileContent(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mcpChange is the part of integrate's answer the test reads.
type mcpChange struct {
	Change struct {
		ID                string `json:"id"`
		State             string `json:"state"`
		Reason            string `json:"reason"`
		AttestationDigest string `json:"attestation_digest"`
		OutputTail        string `json:"output_tail"`
	} `json:"change"`
}

// TestTwoAgentsThroughMCPOnly: two agents whose only way to ag is `ag mcp` (their host edits
// files; no shell runs ag) lease, edit, integrate through the validation gate with a real
// sandboxed worker, meet a conflict, merge it, see a broken change rejected with its output and
// revert it, and end on a mainline with both their work.
func TestTwoAgentsThroughMCPOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		files := map[string]string{
			// The repository's tests: every file is fine unless it says BROKEN.
			"check.sh": "! grep -l BROKEN *.txt\n",
			"a.txt":    "one\ntwo\nthree\n",
			"b.txt":    "b\n",
		}
		g := startGate(t, backend, files, "--timeout", "30s", "--", "sh", "check.sh")
		g.sandboxWorker(t, "w1")
		alice, bob := g.mcpAgent(t, "alice"), g.mcpAgent(t, "bob")

		// Alice changes line 1 and lands it, validated.
		alice.ok(t, "lease_acquire", map[string]any{"paths": []string{"a.txt"}}, nil)
		writeFile(t, alice.dir, "a.txt", "ONE by alice\ntwo\nthree\n")
		var landed mcpChange
		alice.ok(t, "integrate", map[string]any{"message": "alice: line one", "wait": true}, &landed)
		if landed.Change.State != "integrated" || landed.Change.AttestationDigest == "" {
			t.Fatalf("alice's change: %+v, want integrated with an attestation", landed.Change)
		}
		alice.ok(t, "lease_release", map[string]any{}, nil)

		// Bob, still on the old base, changes line 3 of the same file: integrate refuses the
		// stale base, sync merges the two edits, and his change lands on top of hers.
		bob.ok(t, "lease_acquire", map[string]any{"paths": []string{"a.txt"}}, nil)
		writeFile(t, bob.dir, "a.txt", "one\ntwo\nTHREE by bob\n")
		if failed, text := bob.call(t, "integrate", map[string]any{"message": "bob: line three", "wait": true}, nil); !failed || !strings.Contains(text, "sync") {
			t.Fatalf("bob integrates on a stale base: failed=%v %q, want a refusal that says to sync", failed, text)
		}
		var synced struct {
			Applied bool     `json:"applied"`
			Merged  []string `json:"merged"`
		}
		bob.ok(t, "sync", map[string]any{}, &synced)
		if !synced.Applied || len(synced.Merged) != 1 || synced.Merged[0] != "a.txt" {
			t.Fatalf("bob's sync: %+v, want a.txt merged", synced)
		}
		bob.ok(t, "integrate", map[string]any{"message": "bob: line three", "wait": true}, &landed)
		if landed.Change.State != "integrated" {
			t.Fatalf("bob's merged change: %+v", landed.Change)
		}

		// Bob breaks b.txt: the gate rejects it with the test's output, and revert undoes it.
		bob.ok(t, "lease_acquire", map[string]any{"paths": []string{"b.txt"}}, nil)
		writeFile(t, bob.dir, "b.txt", "BROKEN\n")
		var rejected mcpChange
		failed, text := bob.call(t, "integrate", map[string]any{"message": "bob: oops", "wait": true}, &rejected)
		if !failed || rejected.Change.State != "rejected" || !strings.Contains(rejected.Change.OutputTail, "b.txt") {
			t.Fatalf("bob's broken change: failed=%v %q %+v, want rejected with the output naming b.txt", failed, text, rejected.Change)
		}
		var reverted struct {
			Reverted []struct{ Path string } `json:"reverted"`
		}
		bob.ok(t, "revert", map[string]any{"paths": []string{"b.txt"}}, &reverted)
		if len(reverted.Reverted) != 1 || fileContent(t, filepath.Join(bob.dir, "b.txt")) != "b\n" {
			t.Fatalf("bob's revert: %+v, b.txt %q", reverted, fileContent(t, filepath.Join(bob.dir, "b.txt")))
		}

		// Alice syncs and has both edits; the mainline is what both made, and nothing broken.
		alice.ok(t, "sync", map[string]any{}, nil)
		if got := fileContent(t, filepath.Join(alice.dir, "a.txt")); got != "ONE by alice\ntwo\nTHREE by bob\n" {
			t.Fatalf("alice's a.txt after sync: %q, want both edits", got)
		}
		res, err := alice.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "ag://app/mainline/b.txt"})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "b\n" {
			t.Fatalf("the mainline's b.txt: %+v, %v", res, err)
		}
	})
}
