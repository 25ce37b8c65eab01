package cli

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
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
	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/client"
)

// mcpHTTPTokenEnv holds the bearer an MCP host must send to `ag mcp --http`.
const mcpHTTPTokenEnv = "AG_MCP_HTTP_TOKEN"

func newMCPCmd(g *globals) *cobra.Command {
	var httpAddr, httpToken string
	var insecureListen bool
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "an MCP server on stdio for the agent whose token is AG_TOKEN, in the checkout that is its working directory",
		Long: `Serves the Model Context Protocol for one agent in one checkout (made by ag checkout): tools to
see where the checkout stands, lease files, integrate the edits, sync, and follow changes and
jobs, and the repository's mainline as resources. It speaks on stdin and stdout; with --http
ADDR, streamable HTTP on ADDR at /mcp instead, where every request must carry
"Authorization: Bearer <token>" with the token of --http-token or $` + mcpHTTPTokenEnv + ` (a random
one, printed once to stderr, when neither is set). docs/agents.md shows an MCP host's
configuration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			srv, err := newMCPServer(newMCPAgent(ws.co.root, g.server, g.token))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if httpAddr == "" {
				// Stdout is the protocol's: nothing else may be written there.
				err := srv.Run(ctx, &mcp.StdioTransport{})
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if httpToken == "" {
				httpToken = os.Getenv(mcpHTTPTokenEnv)
			}
			return serveMCPHTTP(ctx, srv, httpAddr, httpToken, insecureListen, g.stderr)
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (host:port, loopback unless --insecure-listen) instead of stdio")
	// Like --token, the default is read at run time and not shown: --help would print it.
	cmd.Flags().StringVar(&httpToken, "http-token", "", "the bearer MCP hosts must send to --http (default $"+mcpHTTPTokenEnv+", or a random one printed once)")
	cmd.Flags().BoolVar(&insecureListen, "insecure-listen", false, "let --http listen on a non-loopback address, where the bearer crosses the network in plaintext")
	return cmd
}

// mcpAgent is what the MCP tools act for: one agent, with its token, in one checkout.
type mcpAgent struct {
	dir   string // the checkout's root
	c     *client.Client
	token string // kept only to scrub it from whatever the tools answer

	// mu serializes the tools that rewrite .ag/checkout.json, so that two calls of one host
	// (hosts call tools concurrently) do not each save a state missing the other's lease.
	mu sync.Mutex
}

func newMCPAgent(dir, server, token string) *mcpAgent {
	if token == "" {
		token = os.Getenv("AG_TOKEN")
	}
	return &mcpAgent{dir: dir, c: client.New(server, token, client.WithUserAgent("ag-mcp")), token: token}
}

// workspace reads the checkout's state afresh: the person at the terminal may run ag commands
// in the same checkout between two tool calls.
func (a *mcpAgent) workspace(ctx context.Context) (*workspace, error) {
	co, err := findCheckout(a.dir)
	if err != nil {
		return nil, err
	}
	ws := &workspace{co: co, c: a.c}
	if err := ws.rebuildOldIndex(ctx); err != nil {
		return nil, err
	}
	return ws, nil
}

// scrub removes the agent's token from a text an MCP host will see. No tool puts it there on
// purpose; this is for what the server or a proxy might echo back.
func (a *mcpAgent) scrub(s string) string {
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

// serveMCPHTTP serves srv as streamable HTTP on addr until ctx ends. Every request must carry
// the bearer: a loopback port is reachable by every local user and process, and a web page can
// aim a browser at one. A non-loopback address needs insecureListen, as `ag serve` does.
func serveMCPHTTP(ctx context.Context, srv *mcp.Server, addr, bearer string, insecureListen bool, stderr interface{ Write([]byte) (int, error) }) error {
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
	hs := &http.Server{Handler: mcpHTTPHandler(srv, bearer), ReadHeaderTimeout: 10 * time.Second}
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

// mcpHTTPHandler answers srv's streamable HTTP at /mcp to requests that carry bearer.
func mcpHTTPHandler(srv *mcp.Server, bearer string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: time.Hour,
	})
	want := []byte("Bearer " + bearer)
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ag mcp"`)
			http.Error(w, "missing or wrong bearer: send Authorization: Bearer <the token of ag mcp --http-token or $"+mcpHTTPTokenEnv+">", http.StatusUnauthorized)
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
