package apidocs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

var update = flag.Bool("update", false, "rewrite the answers and the included files in docs/*.md from what the server and the files say")

// repoRoot is where the documents are, seen from this package's directory.
const repoRoot = "../.."

// docs are the documents whose examples run, in this order, on one server: variables that one
// exports are seen by the next.
var docs = []string{"docs/api.md", "docs/worker-protocol.md"}

// TestDocExamples runs the curl examples of the documents against a real server, in order,
// and checks that each answer is the JSON block that follows it in the document, and that
// request and answer both fit the OpenAPI document. It also checks that the files a document
// shows (a "<!-- file: PATH -->" line before a code block) are shown as they are.
//
// What a document may say in a ```sh block:
//   - a curl command: `curl -sS URL -H 'Header: value' ... -d 'JSON'`, or `-d @-` with a
//     here-document (<<EOF ... EOF) as the body; $VARIABLES expand as in the shell. When the
//     next code block is ```json it is the answer: the same fields with the same values, except
//     ids, tokens and times, which need only be of the same kind.
//   - `export NAME=value  # the "a.b" above`: NAME becomes field a.b of the last answer (a
//     number picks an element of a list: "entries.0.digest").
//   - a grpcurl command: `grpcurl -plaintext [-H 'k: v'] [-d 'JSON'] 127.0.0.1:7777 WHAT`, where
//     WHAT is `list`, `describe NAME` or `Service/Method`: the same is done over gRPC (h2c,
//     reflection for list and describe) and must succeed.
//   - anything else (comments, go, node, npm) is not run here.
//
// AG_SERVER and AG_TOKEN (an admin token) are set at the start. Run with -update to rewrite the
// answers and shown files from what they are now.
func TestDocExamples(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{})
	spec := loadOpenAPI(t)
	env := map[string]string{"AG_SERVER": srv.URL, "AG_TOKEN": srv.AdminToken}
	for _, name := range docs {
		path := filepath.Join(repoRoot, name)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		md := parseMarkdown(string(src))
		r := &docRunner{t: t, name: name, env: env, spec: spec, md: md}
		r.checkShownFiles()
		r.run()
		if *update {
			if out := md.String(); out != string(src) {
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("rewrote %s", name)
			}
		}
		if r.examples == 0 {
			t.Errorf("%s: no curl example was run", name)
		}
	}
}

// TestGoExample builds the Go example that docs/api.md shows and runs it against a real server
// as a worker: it claims the job, keeps it, and completes it.
func TestGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	srv := agtest.Start(t, agtest.Options{})
	res, err := srv.Admin.Admin.CreatePrincipal(context.Background(), &agwpv1.CreatePrincipalRequest{Name: "builder", Role: agwpv1.Role_ROLE_WORKER})
	if err != nil {
		t.Fatal(err)
	}
	enq, err := srv.Admin.Jobs.EnqueueJob(context.Background(), &agwpv1.EnqueueJobRequest{Kind: "build"})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "go-worker")
	build := exec.Command("go", "build", "-o", bin, "./docs/examples/go-worker")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./docs/examples/go-worker: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "AG_SERVER="+srv.URL, "AG_TOKEN="+res.GetToken())
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("go-worker: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "completed: JOB_STATE_COMPLETED") {
		t.Errorf("go-worker said:\n%s", out)
	}
	got, err := srv.Admin.Jobs.GetJob(context.Background(), &agwpv1.GetJobRequest{JobId: enq.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	j := got.GetJob()
	if j.GetState() != agwpv1.JobState_JOB_STATE_COMPLETED || j.GetClaimedBy() != "builder|go-1" || j.GetResult().GetFields()["artifact"].GetStringValue() != "app.tar" {
		t.Errorf("after go-worker the job is %v", j)
	}
}

// TestGoLeasesExample builds the Go example of "Leases and Integrate" in docs/api.md and runs it
// against a real server as an agent: it leases a file, integrates its content, and releases the
// lease.
func TestGoLeasesExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	srv := agtest.Start(t, agtest.Options{})
	ctx := context.Background()
	if _, err := srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "notes"}); err != nil {
		t.Fatal(err)
	}
	res, err := srv.Admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "alice", Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "go-leases")
	build := exec.Command("go", "build", "-o", bin, "./internal/apidocs/examples/go-leases")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./internal/apidocs/examples/go-leases: %v\n%s", err, out)
	}
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run := exec.CommandContext(runCtx, bin, "notes")
	run.Env = append(os.Environ(), "AG_SERVER="+srv.URL, "AG_TOKEN="+res.GetToken())
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("go-leases: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "fencing token 1") || !strings.Contains(string(out), "change: CHANGE_STATE_INTEGRATED") {
		t.Errorf("go-leases said:\n%s", out)
	}
	tree, err := srv.Admin.Repos.GetTree(ctx, &agwpv1.GetTreeRequest{Repository: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.GetEntries()) != 1 || tree.GetEntries()[0].GetPath() != "greeting.txt" || tree.GetAuthor() != "alice|go-1" {
		t.Fatalf("after go-leases the mainline's tree is %v", tree)
	}
	content, err := srv.Admin.Blob(ctx, tree.GetEntries()[0].GetDigest())
	if err != nil || string(content) != "hello from Go\n" {
		t.Errorf("greeting.txt is %q (%v), want %q", content, err, "hello from Go\n")
	}
	leases, err := srv.Admin.Leases.ListLeases(ctx, &agwpv1.ListLeasesRequest{Repository: "notes", IncludeEnded: true})
	if err != nil {
		t.Fatal(err)
	}
	if ls := leases.GetLeases(); len(ls) != 1 || ls[0].GetState() != agwpv1.LeaseState_LEASE_STATE_RELEASED {
		t.Errorf("after go-leases the leases are %v, want one released", ls)
	}
}

type docRunner struct {
	t        *testing.T
	name     string
	env      map[string]string
	spec     *openapi3.T
	md       *markdown
	last     any // the last answer, decoded
	examples int
}

// checkShownFiles checks (or, with -update, rewrites) every code block that a
// "<!-- file: PATH -->" line introduces: it must be the file's content.
func (r *docRunner) checkShownFiles() {
	for _, b := range r.md.blocks {
		if b.file == "" {
			continue
		}
		content, err := os.ReadFile(filepath.Join(repoRoot, b.file))
		if err != nil {
			r.t.Errorf("%s:%d shows %s: %v", r.name, b.line, b.file, err)
			continue
		}
		if b.body != string(content) {
			if *update {
				b.body = string(content)
				continue
			}
			r.t.Errorf("%s:%d: the code block differs from %s, which it shows; run go test ./internal/apidocs -update", r.name, b.line, b.file)
		}
	}
}

var exportLine = regexp.MustCompile(`^export ([A-Z_][A-Z0-9_]*)=\S*\s+# the "([A-Za-z0-9_.]+)" above$`)

func (r *docRunner) run() {
	for i, b := range r.md.blocks {
		if b.info != "sh" || b.file != "" {
			continue
		}
		cmds, err := splitCommands(b.body)
		if err != nil {
			r.t.Errorf("%s:%d: %v", r.name, b.line, err)
			continue
		}
		var answer *block
		if i+1 < len(r.md.blocks) && r.md.blocks[i+1].info == "json" {
			answer = r.md.blocks[i+1]
		}
		for n, c := range cmds {
			switch {
			case strings.HasPrefix(c.line, "curl "):
				var want *block
				if n == len(cmds)-1 {
					want = answer
				}
				r.curl(b.line, c, want)
			case strings.HasPrefix(c.line, "grpcurl "):
				r.grpcurl(b.line, c)
			case strings.HasPrefix(c.line, "export "):
				m := exportLine.FindStringSubmatch(c.line)
				if name, _, _ := strings.Cut(strings.TrimPrefix(c.line, "export "), "="); m == nil && r.env[name] != "" && name != "" {
					continue // AG_SERVER, AG_TOKEN: set by the test
				}
				if m == nil {
					r.t.Errorf("%s:%d: %q is not `export NAME=value  # the \"field\" above`", r.name, b.line, c.line)
					continue
				}
				v, ok := lookup(r.last, m[2])
				if !ok {
					r.t.Errorf("%s:%d: the last answer has no %q", r.name, b.line, m[2])
					continue
				}
				r.env[m[1]] = fmt.Sprint(v)
			}
		}
	}
}

// curl runs one curl command and compares its answer with want (nil: any 200 answer).
func (r *docRunner) curl(line int, c command, want *block) {
	t := r.t
	where := fmt.Sprintf("%s:%d", r.name, line)
	words, err := shellWords(c.line, r.env)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	var (
		url, method = "", "GET"
		headers     = http.Header{}
		body        []byte
	)
	for i := 1; i < len(words); i++ {
		w := words[i]
		next := func() string {
			if i+1 >= len(words) {
				t.Errorf("%s: %s needs a value", where, w)
				return ""
			}
			i++
			return words[i]
		}
		switch w {
		case "-s", "-S", "-sS", "-Ss", "--silent", "--show-error":
		case "-H", "--header":
			k, v, ok := strings.Cut(next(), ":")
			if !ok {
				t.Errorf("%s: bad header %q", where, words[i])
				return
			}
			headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-d", "--data", "--data-raw":
			method = "POST"
			d := next()
			if d == "@-" {
				if c.stdin == nil {
					t.Errorf("%s: -d @- without a here-document", where)
					return
				}
				d = strings.TrimSuffix(*c.stdin, "\n")
				if c.expand {
					if d, err = expandVars(d, r.env); err != nil {
						t.Errorf("%s: %v", where, err)
						return
					}
				}
			}
			body = []byte(d)
		case "-X", "--request":
			method = next()
		default:
			if strings.HasPrefix(w, "-") || url != "" {
				t.Errorf("%s: curl argument %q is not understood by this test", where, w)
				return
			}
			url = w
		}
	}
	if !strings.HasPrefix(url, r.env["AG_SERVER"]+"/") {
		t.Errorf("%s: URL %q is not on $AG_SERVER", where, url)
		return
	}
	path := strings.TrimPrefix(url, r.env["AG_SERVER"])
	r.examples++

	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	req.Header = headers.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if method == "POST" {
		r.checkOpenAPI(where, path, headers, body, res, got)
	}
	var gotV any
	if err := json.Unmarshal(got, &gotV); err != nil {
		if want != nil {
			t.Errorf("%s: the answer is not JSON (%v): %s", where, err, got)
		} else if res.StatusCode != http.StatusOK {
			t.Errorf("%s: %s: %s", where, res.Status, got)
		}
		return
	}
	r.last = gotV
	if want == nil {
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: %s: %s", where, res.Status, got)
		}
		return
	}
	if *update {
		var buf bytes.Buffer
		if err := json.Indent(&buf, got, "", "  "); err != nil {
			t.Errorf("%s: %v", where, err)
			return
		}
		// The server escapes <, > and & in strings; the document shows them as they are.
		pretty := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(buf.String())
		want.body = pretty + "\n"
		return
	}
	var wantV any
	if err := json.Unmarshal([]byte(want.body), &wantV); err != nil {
		t.Errorf("%s:%d: the answer block is not JSON: %v", r.name, want.line, err)
		return
	}
	if diffs := compareJSON("", wantV, gotV); len(diffs) > 0 {
		t.Errorf("%s: the answer differs from the document's (%s:%d):\n  %s\nthe server answered:\n%s",
			where, r.name, want.line, strings.Join(diffs, "\n  "), got)
	}
}

// grpcurl does over gRPC what a grpcurl command of the document does, and checks it succeeds.
func (r *docRunner) grpcurl(line int, c command) {
	t := r.t
	where := fmt.Sprintf("%s:%d", r.name, line)
	words, err := shellWords(c.line, r.env)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	headers := http.Header{}
	var (
		data    string
		hasData bool
		args    []string
	)
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-plaintext":
		case (w == "-H" || w == "-d") && i+1 < len(words):
			i++
			if w == "-d" {
				data, hasData = words[i], true
				continue
			}
			k, v, ok := strings.Cut(words[i], ":")
			if !ok {
				t.Errorf("%s: bad header %q", where, words[i])
				return
			}
			headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case strings.HasPrefix(w, "-"):
			t.Errorf("%s: grpcurl argument %q is not understood by this test", where, w)
			return
		default:
			args = append(args, w)
		}
	}
	if len(args) < 2 || args[0] != "127.0.0.1:7777" {
		t.Errorf("%s: want grpcurl ... 127.0.0.1:7777 WHAT (the default address), got %q", where, args)
		return
	}
	r.examples++
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	base := r.env["AG_SERVER"]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch args[1] {
	case "list", "describe":
		stream := grpcreflect.NewClient(hc, base, connect.WithGRPC()).NewStream(ctx)
		defer stream.Close()
		if args[1] == "describe" {
			if len(args) != 3 {
				t.Errorf("%s: describe needs a name", where)
				return
			}
			if _, err := stream.FileContainingSymbol(protoreflect.FullName(args[2])); err != nil {
				t.Errorf("%s: reflection does not describe %s: %v", where, args[2], err)
			}
			return
		}
		names, err := stream.ListServices()
		if err != nil {
			t.Errorf("%s: reflection: %v", where, err)
			return
		}
		for _, sd := range services(t) {
			if !slices.Contains(names, sd.FullName()) {
				t.Errorf("%s: reflection lists %v, not %s", where, names, sd.FullName())
			}
		}
	default:
		svc, method, _ := strings.Cut(args[1], "/")
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok || sd.Methods().ByName(protoreflect.Name(method)) == nil {
			t.Errorf("%s: no method %s", where, args[1])
			return
		}
		md := sd.Methods().ByName(protoreflect.Name(method))
		in := dynamicpb.NewMessage(md.Input())
		if hasData {
			if err := protojson.Unmarshal([]byte(data), in); err != nil {
				t.Errorf("%s: -d is not a %s: %v", where, md.Input().FullName(), err)
				return
			}
		}
		cl := connect.NewClient[dynamicpb.Message, dynamicpb.Message](hc, base+"/"+svc+"/"+method,
			connect.WithGRPC(), connect.WithSchema(md),
			connect.WithResponseInitializer(func(spec connect.Spec, msg any) error {
				out, ok := msg.(*dynamicpb.Message)
				if !ok {
					return fmt.Errorf("unexpected message %T", msg)
				}
				*out = *dynamicpb.NewMessage(md.Output())
				return nil
			}))
		req := connect.NewRequest(in)
		for k, vs := range headers {
			for _, v := range vs {
				req.Header().Add(k, v)
			}
		}
		if _, err := cl.CallUnary(ctx, req); err != nil {
			t.Errorf("%s: %s over gRPC: %v", where, args[1], err)
		}
	}
}

// checkOpenAPI validates a request and its answer against the OpenAPI document.
func (r *docRunner) checkOpenAPI(where, path string, headers http.Header, body []byte, res *http.Response, got []byte) {
	item := r.spec.Paths.Value(path)
	if item == nil || item.Post == nil {
		r.t.Errorf("%s: POST %s is not in the OpenAPI document", where, path)
		return
	}
	req, _ := http.NewRequest(http.MethodPost, "http://ag"+path, bytes.NewReader(body))
	req.Header = headers.Clone()
	in := &openapi3filter.RequestValidationInput{
		Request: req,
		Route:   &routers.Route{Spec: r.spec, Path: path, PathItem: item, Method: http.MethodPost, Operation: item.Post},
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	ctx := context.Background()
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		r.t.Errorf("%s: the request does not fit the OpenAPI document: %v", where, err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Body:                   io.NopCloser(bytes.NewReader(got)),
		Options:                &openapi3filter.Options{MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		r.t.Errorf("%s: the answer does not fit the OpenAPI document: %v\n%s", where, err, got)
	}
}

// variableFields are answer fields whose values differ from run to run: the document's value
// only shows their kind.
var variableFields = map[string]bool{
	"id": true, "jobId": true, "token": true, "tokenId": true, "createdAt": true,
	"updatedAt": true, "runAfter": true, "leaseExpiresAt": true, "finishedAt": true,
	// leases and revisions (revision ids are random, not content digests)
	"acquiredAt": true, "expiresAt": true, "endedAt": true, "changeId": true,
	"mainline": true, "revision": true, "parent": true, "baseRevision": true,
	"candidateRevision": true, "integratedRevision": true,
	// commits name their revision and change and are dated (a tree is content: gitTree is compared)
	"mainlineCommit": true, "gitCommit": true,
	// tasks and messages
	"claimedAt": true, "claimExpiresAt": true, "doneAt": true, "taskId": true,
}

// compareJSON answers how got differs from want: every field of one must be in the other with
// the same value, or, for variableFields, a value of the same kind. Messages of errors (and errorMessage of a CompleteJobs result) may name
// ids, so they are compared with the ids of both blanked out.
func compareJSON(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", orRoot(path), got)}
		}
		var diffs []string
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			wv, inW := w[k]
			gv, inG := g[k]
			p := path + "." + k
			switch {
			case !inG:
				diffs = append(diffs, fmt.Sprintf("%s: in the document, not in the answer", p))
			case !inW:
				diffs = append(diffs, fmt.Sprintf("%s: in the answer (%v), not in the document", p, gv))
			case variableFields[k]:
				if reflect.TypeOf(wv) != reflect.TypeOf(gv) {
					diffs = append(diffs, fmt.Sprintf("%s: want a %T, got %v", p, wv, gv))
				}
			case k == "message" || k == "errorMessage": // a CompleteJobs result carries its error's message
				ws, _ := wv.(string)
				gs, _ := gv.(string)
				if blankIDs(ws) != blankIDs(gs) {
					diffs = append(diffs, fmt.Sprintf("%s: want %q, got %q", p, ws, gs))
				}
			default:
				diffs = append(diffs, compareJSON(p, wv, gv)...)
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", orRoot(path), want, got)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, compareJSON(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: want %v, got %v", orRoot(path), want, got)}
		}
		return nil
	}
}

func orRoot(p string) string {
	if p == "" {
		return "the answer"
	}
	return p
}

// ids ("job_9x2k..."), tokens ("agt_..."), and RFC 3339 times.
var idPattern = regexp.MustCompile(`\b[a-z]{2,8}_[0-9A-Za-z_-]{16,}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

func blankIDs(s string) string { return idPattern.ReplaceAllString(s, "<id>") }

// lookup answers field a.b.c of v; a number picks an element of a list ("entries.0.digest").
func lookup(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// markdown is a document split into its code blocks and the text around them.
type markdown struct {
	parts  []any // string (text) or *block
	blocks []*block
}

type block struct {
	info string // the word after ```
	body string // the lines between the fences, each with its newline
	line int    // 1-based line of the opening fence
	file string // from a "<!-- file: PATH -->" line right before the block
	open string // the opening fence line
}

var fileMarker = regexp.MustCompile(`^<!-- file: (\S+) -->$`)

func parseMarkdown(src string) *markdown {
	md := &markdown{}
	lines := strings.SplitAfter(src, "\n")
	var text strings.Builder
	prev := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimRight(l, "\n")
		if !strings.HasPrefix(trimmed, "```") {
			text.WriteString(l)
			if strings.TrimSpace(trimmed) != "" {
				prev = trimmed
			}
			continue
		}
		b := &block{info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: i + 1, open: l}
		if m := fileMarker.FindStringSubmatch(prev); m != nil {
			b.file = m[1]
		}
		var body strings.Builder
		for i++; i < len(lines) && strings.TrimRight(lines[i], "\n") != "```"; i++ {
			body.WriteString(lines[i])
		}
		b.body = body.String()
		md.parts = append(md.parts, text.String(), b)
		md.blocks = append(md.blocks, b)
		text.Reset()
		prev = ""
	}
	md.parts = append(md.parts, text.String())
	return md
}

func (md *markdown) String() string {
	var sb strings.Builder
	for _, p := range md.parts {
		switch p := p.(type) {
		case string:
			sb.WriteString(p)
		case *block:
			sb.WriteString(p.open)
			sb.WriteString(p.body)
			sb.WriteString("```\n")
		}
	}
	return sb.String()
}

// command is one shell command of a code block, its continuation lines joined, with the
// here-document it reads, if any.
type command struct {
	line   string
	stdin  *string
	expand bool // the here-document's $VARIABLES expand (<<EOF, not <<'EOF')
}

var heredoc = regexp.MustCompile(`\s<<(-?)('?)([A-Z]+)'?\s*$`)

// splitCommands splits a sh block into commands. A here-document marked <<'EOF' is taken
// literally; one marked <<EOF has its $VARIABLES expanded when the command runs.
func splitCommands(body string) ([]command, error) {
	var out []command
	lines := strings.Split(body, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		c := command{line: l}
		if m := heredoc.FindStringSubmatchIndex(l); m != nil {
			quoted := m[4] != m[5]
			end := l[m[6]:m[7]]
			c.line = strings.TrimSpace(l[:m[0]])
			var doc strings.Builder
			for i++; i < len(lines) && lines[i] != end; i++ {
				doc.WriteString(lines[i] + "\n")
			}
			if i >= len(lines) {
				return nil, fmt.Errorf("here-document %s is not closed", end)
			}
			s := doc.String()
			c.stdin, c.expand = &s, !quoted
		}
		out = append(out, c)
	}
	return out, nil
}

// shellWords splits a command line into words as sh would: '...' literal, "..." with $VAR
// expanded, bare words with $VAR expanded. Command substitution is refused.
func shellWords(line string, env map[string]string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		inTok bool
	)
	for i := 0; i < len(line); {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t':
			if inTok {
				words = append(words, cur.String())
				cur.Reset()
				inTok = false
			}
			i++
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			inTok = true
			i += j + 2
		case ch == '"':
			inTok = true
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				switch line[i] {
				case '\\':
					if i+1 < len(line) && strings.ContainsRune("$`\"\\", rune(line[i+1])) {
						i++
					}
					cur.WriteByte(line[i])
				case '$':
					v, k, err := expandAt(line, i, env)
					if err != nil {
						return nil, err
					}
					cur.WriteString(v)
					i = k - 1
				default:
					cur.WriteByte(line[i])
				}
			}
			if i >= len(line) {
				return nil, fmt.Errorf("unclosed \" in %q", line)
			}
			i++
		case ch == '$':
			v, k, err := expandAt(line, i, env)
			if err != nil {
				return nil, err
			}
			cur.WriteString(v)
			inTok = true
			i = k
		case ch == '|' || ch == ';' || ch == '&' || ch == '>' || ch == '<' || ch == '`':
			return nil, fmt.Errorf("%q: pipes, redirections and substitutions are not supported here", line)
		default:
			cur.WriteByte(ch)
			inTok = true
			i++
		}
	}
	if inTok {
		words = append(words, cur.String())
	}
	return words, nil
}

// expandAt expands the variable whose $ is at s[i]; it answers its value and where it ends.
func expandAt(s string, i int, env map[string]string) (string, int, error) {
	// s[i] == '$'
	j := i + 1
	if j < len(s) && s[j] == '(' {
		return "", 0, fmt.Errorf("command substitution is not supported: %s", s[i:])
	}
	braced := j < len(s) && s[j] == '{'
	if braced {
		j++
	}
	k := j
	for k < len(s) && (s[k] == '_' || s[k] >= 'A' && s[k] <= 'Z' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= '0' && s[k] <= '9') {
		k++
	}
	name := s[j:k]
	if braced {
		if k >= len(s) || s[k] != '}' {
			return "", 0, fmt.Errorf("unclosed ${ in %q", s)
		}
		k++
	}
	if name == "" {
		return "$", i + 1, nil
	}
	v, ok := env[name]
	if !ok {
		return "", 0, fmt.Errorf("$%s is not set at this point of the document", name)
	}
	return v, k, nil
}

// expandVars expands every $VARIABLE of s, as a here-document does.
func expandVars(s string, env map[string]string) (string, error) {
	var out strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' {
			out.WriteByte(s[i])
			i++
			continue
		}
		v, k, err := expandAt(s, i, env)
		if err != nil {
			return "", err
		}
		out.WriteString(v)
		i = k
	}
	return out.String(), nil
}
