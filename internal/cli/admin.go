package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/checkout"
)

func parseRole(s string) (agwpv1.Role, error) {
	v, ok := agwpv1.Role_value["ROLE_"+strings.ToUpper(s)]
	if !ok || v == 0 {
		return 0, fmt.Errorf("--role %q: use admin, agent, worker, reader or reviewer", s)
	}
	return agwpv1.Role(v), nil
}

func roleName(r agwpv1.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

func newPrincipalCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "principal", Short: "manage principals (admin)"}
	var role string
	create := &cobra.Command{
		Use:   "create NAME --role ROLE",
		Short: "create a principal and print its token (shown once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRole(role)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Admin.CreatePrincipal(cmd.Context(), &agwpv1.CreatePrincipalRequest{Name: args[0], Role: r})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			termPrintf(g.stdout, "created principal %s (role %s). Its token, shown only this once:\n%s\n",
				res.GetPrincipal().GetName(), roleName(res.GetPrincipal().GetRole()), res.GetToken())
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "admin, agent, worker, reader or reviewer (a reader who approves changes to protected paths) (required)")
	_ = create.MarkFlagRequired("role")

	list := &cobra.Command{
		Use:   "list",
		Short: "list principals",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			principals, err := checkout.AllPages(func(token string) ([]*agwpv1.Principal, string, error) {
				res, err := c.Admin.ListPrincipals(cmd.Context(), &agwpv1.ListPrincipalsRequest{PageSize: 1000, PageToken: token})
				return res.GetPrincipals(), res.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			out := &agwpv1.ListPrincipalsResponse{Principals: principals}
			if g.json {
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tSTATUS\tCREATED")
			for _, p := range out.GetPrincipals() {
				status := "active"
				if p.GetDisabled() {
					status = "disabled"
				}
				termPrintf(tw, "%s\t%s\t%s\t%s\n", p.GetName(), roleName(p.GetRole()), status, formatTime(p.GetCreatedAt()))
			}
			return tw.Flush()
		},
	}
	disable := &cobra.Command{
		Use:   "disable NAME",
		Short: "disable a principal: all its tokens stop working",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Admin.DisablePrincipal(cmd.Context(), &agwpv1.DisablePrincipalRequest{Name: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			termPrintf(g.stdout, "disabled principal %s\n", res.GetPrincipal().GetName())
			return nil
		},
	}
	cmd.AddCommand(create, list, disable)
	return cmd
}

func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "manage bearer tokens (admin)"}
	create := &cobra.Command{
		Use:   "create PRINCIPAL",
		Short: "create another token for a principal (shown once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Admin.CreateToken(cmd.Context(), &agwpv1.CreateTokenRequest{Principal: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			termPrintf(g.stdout, "created token %s for %s, shown only this once:\n%s\n", res.GetTokenInfo().GetId(), args[0], res.GetToken())
			return nil
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke TOKEN_ID",
		Short: "revoke a token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Admin.RevokeToken(cmd.Context(), &agwpv1.RevokeTokenRequest{TokenId: args[0]})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			termPrintf(g.stdout, "revoked token %s of %s\n", res.GetTokenInfo().GetId(), res.GetTokenInfo().GetPrincipal())
			return nil
		},
	}
	cmd.AddCommand(create, revoke)
	return cmd
}

func newWhoAmICmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "print the principal of the token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Admin.WhoAmI(cmd.Context(), &agwpv1.WhoAmIRequest{})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			termPrintf(g.stdout, "%s (role %s)\n", res.GetPrincipal().GetName(), roleName(res.GetPrincipal().GetRole()))
			return nil
		},
	}
}
