package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/usage"
)

func init() { rootCmd.AddCommand(newUsageCmd()) }

func newUsageCmd() *cobra.Command {
	var database, from, to string
	var q client.UsageQuery
	var o outputFormat
	var asCSV bool
	var top string
	var limit int
	cmd := &cobra.Command{
		Use:   "usage <tenant> [--rule R] [--step minute|hour|day | --top denied|units [--limit N]] [--from T] [--to T] [--csv]",
		Short: "Show a tenant's usage history: allowed, denied, shadow-denied, degraded and shed checks and units per rule and period",
		Long: `Show a tenant's usage history, summed across every instance: per rule and period,
the checks allowed, denied, shadow-denied, answered by the failure mode (degraded) and shed,
and the units spent. Instances write their counts to the catalog database every --usage-flush
(default 1m), the minute under way included, so a decision shows here within about one
flush interval.

With --server and --token it reads the server's GET /v1/tenants/{tenant}/usage (a tenant
admin key reads its own tenant only); without, the catalog database of --database. --from
and --to take a time (2026-12-01T17:00:00Z) or a duration back from now (24h); without
--from, the last hour of minutes, day of hours or 30 days of days, by --step.

With --top it lists the heaviest subjects instead, by denials or by units, over the hours
of the range (default: the last hour), summed over the instances that counted them.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			var err error
			if q.From, err = client.ParseAuditTime("--from", from, now); err != nil {
				return err
			}
			if q.To, err = client.ParseAuditTime("--to", to, now); err != nil {
				return err
			}
			if top != "" {
				t, err := readTop(cmd, database, args[0], client.TopQuery{Rule: q.Rule, By: top, From: q.From, To: q.To, Limit: limit}, now)
				if err != nil {
					return err
				}
				if asCSV {
					_, err := cmd.OutOrStdout().Write(t.CSV())
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintTopSubjects(w, t.Subjects) }, t)
			}
			u, err := readUsage(cmd, database, args[0], q, now)
			if err != nil {
				return err
			}
			if asCSV {
				_, err := cmd.OutOrStdout().Write(u.CSV())
				return err
			}
			return render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintUsage(w, u.Rows) }, u)
		},
	}
	addDatabaseFlag(cmd, &database)
	addOutputFlag(cmd, &o)
	f := cmd.Flags()
	f.StringVar(&q.Rule, "rule", "", "only this rule (default: every rule)")
	f.StringVar(&q.Step, "step", "minute", "the period each row sums: minute, hour or day")
	f.StringVar(&from, "from", "", "periods starting at or after this time, or this long ago (24h)")
	f.StringVar(&to, "to", "", "periods starting before this time, or this long ago (default now)")
	f.BoolVar(&asCSV, "csv", false, "write CSV with a header line instead of -o")
	f.StringVar(&top, "top", "", "list the heaviest subjects instead, by denied or units")
	f.IntVar(&limit, "limit", usage.TopN, fmt.Sprintf("with --top, most subjects listed (1 to %d)", usage.MaxTopLimit))
	return cmd
}

// readUsage reads through the server's admin API with --server, else from
// the catalog database.
func readUsage(cmd *cobra.Command, database, tenant string, q client.UsageQuery, now time.Time) (client.Usage, error) {
	if remote.server != "" {
		a, err := remoteAdmin(cmd)
		if err != nil {
			return client.Usage{}, err
		}
		u, err := a.Usage(cmd.Context(), tenant, q)
		return u, unreachable(err)
	}
	uq := usage.Query{Rule: q.Rule, Step: usage.Step(q.Step), From: q.From, To: q.To}
	if uq.Step.Duration() == 0 {
		return client.Usage{}, fmt.Errorf("--step %q is not one of minute, hour or day", q.Step)
	}
	if uq.To.IsZero() {
		uq.To = now
	}
	if uq.From.IsZero() {
		uq.From = uq.To.Add(-usage.DefaultSpan(uq.Step))
	}
	var u client.Usage
	err := withDatabase(cmd.Context(), database, readOnly, func(c sluice.Catalog) error {
		reader, namespace, err := usageReader(cmd, c, tenant)
		if err != nil {
			return err
		}
		uq.Namespace = namespace
		rows, err := reader.ReadUsage(cmd.Context(), uq)
		if err != nil {
			return err
		}
		gaps, err := reader.ReadGaps(cmd.Context(), uq)
		if err != nil {
			return err
		}
		u = adminapi.NewUsage(tenant, uq, rows, gaps)
		return nil
	})
	return u, err
}

// readTop reads the heaviest subjects through the server's admin API with
// --server, else from the catalog database.
func readTop(cmd *cobra.Command, database, tenant string, q client.TopQuery, now time.Time) (client.TopSubjects, error) {
	if q.By != string(usage.ByDenied) && q.By != string(usage.ByUnits) {
		return client.TopSubjects{}, fmt.Errorf("--top %q is not denied or units", q.By)
	}
	if q.Limit < 1 || q.Limit > usage.MaxTopLimit {
		return client.TopSubjects{}, fmt.Errorf("--limit %d is not between 1 and %d", q.Limit, usage.MaxTopLimit)
	}
	if remote.server != "" {
		a, err := remoteAdmin(cmd)
		if err != nil {
			return client.TopSubjects{}, err
		}
		t, err := a.TopSubjects(cmd.Context(), tenant, q)
		return t, unreachable(err)
	}
	tq := usage.TopQuery{Rule: q.Rule, By: usage.By(q.By), From: q.From, To: q.To, Limit: q.Limit}
	if tq.To.IsZero() {
		tq.To = now
	}
	if tq.From.IsZero() {
		tq.From = tq.To.Add(-time.Hour)
	}
	var t client.TopSubjects
	err := withDatabase(cmd.Context(), database, readOnly, func(c sluice.Catalog) error {
		reader, namespace, err := usageReader(cmd, c, tenant)
		if err != nil {
			return err
		}
		tq.Namespace = namespace
		subjects, err := reader.ReadTop(cmd.Context(), tq)
		if err != nil {
			return err
		}
		t = adminapi.NewTopSubjects(tenant, tq, subjects)
		return nil
	})
	return t, err
}

// usageReader returns c's usage reader and tenant's namespace in it.
func usageReader(cmd *cobra.Command, c sluice.Catalog, tenant string) (usage.Reader, string, error) {
	reader, ok := c.(usage.Reader)
	if !ok {
		return nil, "", fmt.Errorf("this catalog database keeps no usage history")
	}
	t, err := c.Tenant(cmd.Context(), tenant)
	if err != nil {
		return nil, "", err
	}
	return reader, t.CounterNamespace(), nil
}
