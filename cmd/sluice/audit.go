package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

func init() { rootCmd.AddCommand(newAuditCmd()) }

func newAuditCmd() *cobra.Command {
	var database, since, until string
	var q client.AuditQuery
	var o outputFormat
	cmd := &cobra.Command{
		Use:   "audit [--tenant T] [--actor A] [--action X] [--since T] [--until T] [--limit N] [--before ID]",
		Short: "List recorded catalog changes, newest first: who changed what, before and after",
		Long: `List recorded catalog changes, newest first: who made each (operator, system, or
the ID of a tenant admin key), what it did, the thing changed before and after, and when.

With --server and --token it reads the server's GET /v1/audit (a tenant admin key sees its
own tenant only); without, the catalog database of --database. --since and --until take a
time (2026-12-01T17:00:00Z) or a duration back from now (24h). A page holds --limit entries;
when there are more, the command says which --before reads the next page.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if q.Limit < 1 || q.Limit > sluice.MaxAuditLimit {
				return fmt.Errorf("--limit %d is not between 1 and %d", q.Limit, sluice.MaxAuditLimit)
			}
			var err error
			if q.Since, err = client.ParseAuditTime("--since", since, time.Now()); err != nil {
				return err
			}
			if q.Until, err = client.ParseAuditTime("--until", until, time.Now()); err != nil {
				return err
			}
			page, err := readAudit(cmd, database, q)
			if err != nil {
				return err
			}
			if err := render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintAudit(w, page.Entries) }, page); err != nil {
				return err
			}
			if page.NextBefore != nil && o == "table" {
				fmt.Fprintf(cmd.ErrOrStderr(), "More entries: repeat with --before %d.\n", *page.NextBefore)
			}
			return nil
		},
	}
	addDatabaseFlag(cmd, &database)
	addOutputFlag(cmd, &o)
	f := cmd.Flags()
	f.StringVar(&q.Tenant, "tenant", "", "only this tenant's entries")
	f.StringVar(&q.Actor, "actor", "", "only entries made by this actor: operator, system or a key ID")
	f.StringVar(&q.Action, "action", "", "only entries of this action (tenant.create, key.revoke, rule.replace, ...)")
	f.StringVar(&since, "since", "", "only entries at or after this time, or this long ago (24h)")
	f.StringVar(&until, "until", "", "only entries before this time, or this long ago")
	f.IntVar(&q.Limit, "limit", sluice.DefaultAuditLimit, fmt.Sprintf("most entries shown (1 to %d)", sluice.MaxAuditLimit))
	f.Int64Var(&q.Before, "before", 0, "only entries with a smaller ID: the next page of a listing")
	return cmd
}

// readAudit reads one page through the server's admin API with --server,
// else from the catalog database.
func readAudit(cmd *cobra.Command, database string, q client.AuditQuery) (client.AuditPage, error) {
	if remote.server != "" {
		a, err := remoteAdmin(cmd)
		if err != nil {
			return client.AuditPage{}, err
		}
		page, err := a.Audit(cmd.Context(), q)
		return page, unreachable(err)
	}
	var page client.AuditPage
	err := withDatabase(cmd.Context(), database, readOnly, func(c sluice.Catalog) error {
		entries, err := c.Audit(cmd.Context(), sluice.AuditQuery{Tenant: q.Tenant, Actor: q.Actor, Action: q.Action,
			Since: q.Since, Until: q.Until, Before: q.Before, Limit: q.Limit})
		if err != nil {
			return err
		}
		page, err = client.NewAuditPage(entries, q.Limit)
		return err
	})
	return page, err
}
