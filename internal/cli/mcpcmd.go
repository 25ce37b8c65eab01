package cli

import (
	"github.com/spf13/cobra"

	"github.com/ag-coord/ag/internal/mcp"
)

func newMCPCmd(g *globals) *cobra.Command {
	var httpAddr, httpToken string
	var insecureListen bool
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "an MCP server on stdio for the agent whose token is AG_TOKEN, in the working copy that is its working directory",
		Long: `Serves the Model Context Protocol for one agent in one working copy (made by ag checkout, or a git
working tree made by ag clone or ag init, where integrate commits and pushes to refs/for/main):
tools to see where the working copy stands, lease files, integrate the edits, sync, and follow
changes and jobs, and the repository's mainline as resources. It speaks on stdin and stdout; with --http
ADDR, streamable HTTP on ADDR at /mcp instead, where every request must carry
"Authorization: Bearer <token>" with the token of --http-token or $` + mcp.HTTPTokenEnv + ` (a random
one, printed once to stderr, when neither is set). docs/agents.md shows an MCP host's
configuration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := g.workspace(cmd.Context())
			if err != nil {
				return err
			}
			return mcp.Serve(cmd.Context(), mcp.Config{Dir: ws.Checkout.Root(), Server: g.server, Token: g.token,
				HTTPAddr: httpAddr, HTTPToken: httpToken, InsecureListen: insecureListen, Stderr: g.stderr})
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (host:port, loopback unless --insecure-listen) instead of stdio")
	// Like --token, the default is read at run time and not shown: --help would print it.
	cmd.Flags().StringVar(&httpToken, "http-token", "", "the bearer MCP hosts must send to --http (default $"+mcp.HTTPTokenEnv+", or a random one printed once)")
	cmd.Flags().BoolVar(&insecureListen, "insecure-listen", false, "let --http listen on a non-loopback address, where the bearer crosses the network in plaintext")
	return cmd
}
