package main

// sluice check asks a running server's check API for a decision, as an
// application would, and sluice subject reset gives a subject back its full
// quota, through a server or straight in its Redis.

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/client"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func init() {
	rootCmd.AddCommand(newCheckCmd(), newSubjectCmd())
}

// exitCode is an error that only sets the exit status: what there was to say
// is already printed.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exitDenied is the exit status of sluice check --fail-on-deny on a denial:
// not 1, so a script can tell a denial from a failed command.
const exitDenied exitCode = 2

func newCheckCmd() *cobra.Command {
	var (
		route, subject, apiKey string
		cost                   int64
		failOnDeny             bool
		o                      outputFormat
	)
	cmd := &cobra.Command{
		Use:   "check --route ROUTE [--subject SUBJECT] [--cost N] --api-key KEY",
		Short: "Ask a running server whether a request may go through (consumes quota)",
		Long: `Ask the check API of the server of --server whether a request on --route by
--subject may go through, as an application would; an allowed check consumes
--cost from the matched rule's limits (--cost 0 only looks).

The decision is printed. A denial is an answer, not a failure: the exit status
is 0 for an allowed and a denied request alike, unless --fail-on-deny, which
makes a denial exit with status 2. Status 1 means the check could not be made.`,
		Example: `  sluice check --server http://localhost:8080 --api-key "$KEY" --route /api/orders --subject user-42
  sluice check --route /api/orders --subject user-42 --cost 0 -o json   # peek, with SLUICE_SERVER and SLUICE_API_KEY set
  sluice check --route /api/orders --subject ci --fail-on-deny || echo denied`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if remote.server == "" {
				return errors.New("check needs --server (or SLUICE_SERVER): the URL of a running sluice serve")
			}
			if apiKey == "" {
				return errors.New("check needs --api-key (or SLUICE_API_KEY): a check-role key of the tenant, as created by sluice key create --role check")
			}
			if route == "" {
				return errors.New("check needs --route: the path of the request to decide, like /api/orders/17")
			}
			if cost < 0 {
				return fmt.Errorf("--cost %d is negative; use a positive cost, or 0 to look without consuming", cost)
			}
			c, err := client.New(remote.server, apiKey, client.WithTimeout(client.DefaultAdminTimeout))
			if err != nil {
				return fmt.Errorf("--server: %w", err)
			}
			res, err := c.Check(cmd.Context(), route, subject, cost)
			if err != nil {
				return unreachable(err)
			}
			if err := render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintDecision(w, route, res) }, res.Wire()); err != nil {
				return err
			}
			if !res.Allowed && failOnDeny {
				return exitDenied
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&route, "route", "", "path of the request, like /api/orders/17")
	f.StringVar(&subject, "subject", "", "who the request is from (user, IP, ...); default: the tenant as a whole")
	f.Int64Var(&cost, "cost", 1, "quota the request uses; 0 looks without consuming")
	f.StringVar(&apiKey, "api-key", "", "a check-role API key of the tenant (SLUICE_API_KEY)")
	f.BoolVar(&failOnDeny, "fail-on-deny", false, "exit with status 2 when the request is denied")
	addOutputFlag(cmd, &o)
	return cmd
}

func newSubjectCmd() *cobra.Command {
	var database, redisURL, redisPrefix string
	cmd := groupCmd("subject", "Manage a subject's counters (reset)")
	addDatabaseFlag(cmd, &database)
	reset := &cobra.Command{
		Use:   "reset <tenant> <rule> <subject>",
		Short: "Forget a subject's counters under a rule: its next request has the full quota",
		Long: `Forget a subject's counters under a rule, in the store and in every instance's
deny cache: its next request starts from the full quota.

With --server (and --token) the server does it. Without, the counters are
deleted from the Redis of --redis (with the servers' --redis-prefix) and the
instances told through the catalog database of --database. Counters of the
embedded memory store live inside the serving process: reset those with
--server.`,
		Example: `  sluice subject reset acme payments user-42 --server http://localhost:8080 --token "$TOKEN"
  sluice subject reset acme payments user-42 --database postgres://sluice@db/sluice --redis redis://redis:6379/0`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, rule, subject := args[0], args[1], args[2]
			if remote.server != "" {
				if cmd.Flags().Changed("redis") {
					return errors.New("--server and --redis both given; the server resets in its own store, so give only --server")
				}
				a, err := remoteAdmin(cmd)
				if err != nil {
					return err
				}
				if err := a.ResetSubject(cmd.Context(), tenant, rule, subject); err != nil {
					return unreachable(err)
				}
			} else {
				if redisURL == "" {
					return errors.New("subject reset needs --server and --token (or SLUICE_SERVER and SLUICE_TOKEN), or --redis with --database: the counters live in the servers' store, not in the catalog database")
				}
				err := withDatabase(cmd.Context(), database, readOnly, func(c sluice.Catalog) error {
					return resetInStore(cmd.Context(), c, redisURL, redisPrefix, tenant, rule, subject)
				})
				if err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Reset subject %s under rule %s of tenant %s.\n", subject, rule, tenant)
			return nil
		},
	}
	reset.Flags().StringVar(&redisURL, "redis", "", "without --server: the servers' Redis (redis://, redis-cluster://, redis-sentinel://)")
	reset.Flags().StringVar(&redisPrefix, "redis-prefix", "sluice:", "without --server: the servers' --redis-prefix")
	cmd.AddCommand(reset)
	return cmd
}

// resetInStore does what the admin API's reset does (check.ResetSubject),
// from outside a server, on the servers' Redis.
func resetInStore(ctx context.Context, c sluice.Catalog, redisURL, prefix, tenant, rule, subject string) error {
	store, err := sluiceredis.Open(redisURL, sluiceredis.Options{Prefix: prefix})
	if err != nil {
		return fmt.Errorf("open Redis: %w", err)
	}
	defer store.Close()
	engine := check.New(store, check.Options{})
	defer engine.Close()
	return engine.ResetSubject(ctx, c, tenant, rule, subject)
}
