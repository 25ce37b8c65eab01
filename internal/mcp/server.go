package mcp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/checkout"
	"github.com/ag-coord/ag/internal/gitwork"
)

// HTTPTokenEnv holds the bearer an MCP host must send to `ag mcp --http`.
const HTTPTokenEnv = "AG_MCP_HTTP_TOKEN"

// Config is what `ag mcp` serves: the agent with Token in the working copy at Dir (an ag
// checkout, or a git working tree from ag clone or ag init), on Server.
type Config struct {
	Dir    string // the working copy's root
	Server string
	Token  string // default $AG_TOKEN
	// HTTPAddr, when set, serves streamable HTTP there instead of stdio, to requests carrying
	// HTTPToken (default $AG_MCP_HTTP_TOKEN, or a random one printed to Stderr).
	HTTPAddr       string
	HTTPToken      string
	InsecureListen bool // let HTTPAddr be a non-loopback address
	Stderr         io.Writer
}

// Serve serves the MCP server of cfg's agent until ctx ends or the host hangs up.
func Serve(ctx context.Context, cfg Config) error {
	srv, err := newServer(newAgent(cfg.Dir, cfg.Server, cfg.Token))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.HTTPAddr == "" {
		// Stdout is the protocol's: nothing else may be written there.
		err := srv.Run(ctx, &mcp.StdioTransport{})
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	httpToken := cfg.HTTPToken
	if httpToken == "" {
		httpToken = os.Getenv(HTTPTokenEnv)
	}
	return serveHTTP(ctx, srv, cfg.HTTPAddr, httpToken, cfg.InsecureListen, cfg.Stderr)
}

// maxToolWait is the longest a tool call waits: under the 60 s an MCP host's client times a
// request out after by default.
const maxToolWait = 45 * time.Second

// agent is what the MCP tools act for: one agent, with its token, in one working copy: an ag
// checkout, or a git working tree set up for ag by ag clone or ag init.
type agent struct {
	dir   string // the working copy's root
	c     *client.Client
	token string // kept only to scrub it from whatever the tools answer

	// toolWait bounds every wait of a tool call (maxToolWait): an MCP host times a call out on
	// its own (the TypeScript client after 60 s), and an agent whose call died loses track.
	toolWait time.Duration

	// mu serializes the tools that rewrite .ag/checkout.json, so that two calls of one host
	// (hosts call tools concurrently) do not each save a state missing the other's lease.
	mu sync.Mutex

	// tasks keeps the task claims task_claim took and the last message the inbox tool answered
	// where the working copy keeps none (tasks.go).
	tasks taskMemory
	// inbox watches the holder's inbox for the sessions subscribed to its resource (inbox.go).
	inbox inboxWatch
	// inboxPoll is how long one ListMessages of the inbox watch waits (inboxPollWait).
	inboxPoll time.Duration
}

func newAgent(dir, server, token string) *agent {
	if token == "" {
		token = os.Getenv("AG_TOKEN")
	}
	return &agent{dir: dir, c: client.New(server, token, client.WithUserAgent("ag-mcp")), token: token, toolWait: maxToolWait,
		inboxPoll: inboxPollWait}
}

// workspace reads the checkout's state afresh: the person at the terminal may run ag commands
// in the same checkout between two tool calls. In a git working tree it is the tree's, whose
// leases are those the server lists as its holder's.
func (a *agent) workspace(ctx context.Context) (*checkout.Workspace, error) {
	co, t, err := a.find()
	switch {
	case err != nil:
		return nil, err
	case t != nil:
		return t.Workspace(ctx, a.c)
	}
	return checkout.NewWorkspace(ctx, co, a.c)
}

// find finds the working copy at the agent's directory as the command line does: an ag
// checkout, else the git working tree set up for ag there (t), else the checkout's refusal.
func (a *agent) find() (co *checkout.Checkout, t *gitwork.Tree, err error) {
	co, err = checkout.Find(a.dir)
	var none *checkout.NotFoundError
	if !errors.As(err, &none) {
		return co, nil, err
	}
	t, gitErr := gitwork.Find(a.dir)
	if errors.Is(gitErr, gitwork.ErrNotGit) {
		return nil, nil, err
	}
	return nil, t, gitErr
}

// gitTree answers the git working tree the agent works in, nil in an ag checkout.
func (a *agent) gitTree() (*gitwork.Tree, error) {
	_, t, err := a.find()
	return t, err
}

// scrub removes the agent's token from a text an MCP host will see. No tool puts it there on
// purpose; this is for what the server or a proxy might echo back.
func (a *agent) scrub(s string) string {
	if a.token == "" {
		return s
	}
	return strings.ReplaceAll(s, a.token, "[token]")
}

// agentError turns an error into the text an agent reads: what happened and what to do next.
// The Connect code becomes the advice, since an agent cannot act on a code's name.
func agentError(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	msg := ce.Message()
	switch ce.Code() {
	case connect.CodeUnavailable:
		return "cannot reach the ag server: " + msg + " (try again shortly; if it persists, the operator must start `ag serve` or fix AG_SERVER in the MCP configuration)"
	case connect.CodeUnauthenticated:
		return "the ag server refused this agent's token: " + msg + " (the operator must set a valid AG_TOKEN in the MCP configuration)"
	case connect.CodePermissionDenied:
		return "not allowed: " + msg + " (this agent's role may not do that: ask the operator)"
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return "the call did not finish: " + msg + " (try again)"
	}
	return strings.ReplaceAll(ce.Code().String(), "_", " ") + ": " + msg
}

// serveHTTP serves srv as streamable HTTP on addr until ctx ends. Every request must carry
// the bearer: a loopback port is reachable by every local user and process, and a web page can
// aim a browser at one. A non-loopback address needs insecureListen, as `ag serve` does.
func serveHTTP(ctx context.Context, srv *mcp.Server, addr, bearer string, insecureListen bool, stderr interface{ Write([]byte) (int, error) }) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: use host:port, such as 127.0.0.1:8931", addr)
	}
	if !isLoopbackHost(host) && !insecureListen {
		return fmt.Errorf("--http %q is not a loopback address: the bearer and the repository's files would cross the network in plaintext. Use 127.0.0.1:PORT, or pass --insecure-listen behind a TLS proxy", addr)
	}
	generated := bearer == ""
	if generated {
		bearer = "agm_" + rand.Text()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if generated {
		fmt.Fprintf(stderr, "ag mcp: serving http://%s/mcp; MCP hosts must send: Authorization: Bearer %s\n", ln.Addr(), bearer)
	} else {
		fmt.Fprintf(stderr, "ag mcp: serving http://%s/mcp\n", ln.Addr())
	}
	hs := &http.Server{Handler: httpHandler(srv, bearer), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// httpHandler answers srv's streamable HTTP at /mcp to requests that carry bearer.
func httpHandler(srv *mcp.Server, bearer string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: time.Hour,
	})
	want := []byte("Bearer " + bearer)
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ag mcp"`)
			http.Error(w, "missing or wrong bearer: send Authorization: Bearer <the token of ag mcp --http-token or $"+HTTPTokenEnv+">", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	return http.NewCrossOriginProtection().Handler(mux)
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
