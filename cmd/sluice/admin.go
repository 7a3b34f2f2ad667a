package main

// The admin subcommands work directly on the catalog database (--database),
// which is what an operator bootstrapping a box wants (running instances see
// the changes through the catalog's change feed within a second), or, with
// --server and --token, through a running server's admin API (backend.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/catalogfile"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogdb"
)

func init() {
	rootCmd.AddCommand(newMigrateCmd(), newTenantCmd(), newKeyCmd(), newRuleCmd(), newOverrideCmd())
}

// readCmd is a command that reads the catalog and prints what it read in the
// format of -o.
func readCmd(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, args []string, o outputFormat) error) *cobra.Command {
	var o outputFormat
	cmd := &cobra.Command{Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error { return run(cmd, args, o) }}
	addOutputFlag(cmd, &o)
	return cmd
}

// addDatabaseFlag gives a command group the --database flag (SLUICE_DATABASE).
func addDatabaseFlag(cmd *cobra.Command, database *string) {
	cmd.PersistentFlags().StringVar(database, "database", catalogdb.Default, "catalog database: postgres://... or sqlite://path")
}

// withCatalog opens the migrated catalog, runs fn, and closes it.
func withCatalog(ctx context.Context, database string, fn func(sluice.Catalog) error) error {
	c, err := openMigratedCatalog(ctx, database)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

func newMigrateCmd() *cobra.Command {
	var database string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending catalog migrations and exit",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCatalog(cmd.Context(), database, func(sluice.Catalog) error {
				fmt.Fprintln(cmd.OutOrStdout(), "The catalog schema is up to date.")
				return nil
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	return cmd
}

// --- tenants

func newTenantCmd() *cobra.Command {
	var database string
	cmd := groupCmd("tenant", "Manage tenants (create, list, suspend, resume, delete)")
	addDatabaseFlag(cmd, &database)
	setStatus := func(use, short string, status sluice.TenantStatus, done string) *cobra.Command {
		return &cobra.Command{
			Use: use + " <tenant>", Short: short, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withBackend(cmd, database, readWrite, func(c adminBackend) error {
					if _, err := c.SetTenantStatus(cmd.Context(), args[0], status); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "Tenant %s %s.\n", args[0], done)
					return nil
				})
			},
		}
	}
	cmd.AddCommand(
		&cobra.Command{
			Use: "create <tenant>", Short: "Create an active tenant", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withBackend(cmd, database, readWrite, func(c adminBackend) error {
					t, err := c.CreateTenant(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "Created tenant %s.\n", t.Name)
					return nil
				})
			},
		},
		readCmd("list", "List tenants", noArgs, func(cmd *cobra.Command, args []string, o outputFormat) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				ts, err := c.Tenants(cmd.Context())
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintTenants(w, ts) }, adminapi.NewTenantList(ts))
			})
		}),
		setStatus("suspend", "Suspend a tenant: its keys are refused until it is resumed", sluice.TenantSuspended, "suspended"),
		setStatus("resume", "Resume a suspended tenant", sluice.TenantActive, "resumed"),
		&cobra.Command{
			Use: "delete <tenant>", Short: "Delete a tenant with its keys and rules", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withBackend(cmd, database, readWrite, func(c adminBackend) error {
					if err := c.DeleteTenant(cmd.Context(), args[0]); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "Deleted tenant %s.\n", args[0])
					return nil
				})
			},
		},
	)
	return cmd
}

// --- keys

func newKeyCmd() *cobra.Command {
	var database string
	cmd := groupCmd("key", "Manage API keys (create, list, revoke)")
	addDatabaseFlag(cmd, &database)

	var role, name string
	create := &cobra.Command{
		Use:   "create <tenant> --role check|admin|metrics [--name NAME]",
		Short: "Create an API key; its secret is printed once, on stdout",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := sluice.Role(role)
			if err := r.Validate(); err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if name == "" {
				name = httpapi.DefaultKeyName(r)
			}
			if err := sluice.KeyName(name).Validate(); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			return withBackend(cmd, database, readWrite, func(c adminBackend) error {
				k, secret, err := c.NewKey(cmd.Context(), args[0], name, r)
				if err != nil {
					return err
				}
				// The secret alone on stdout, so KEY=$(sluice key create ...) works.
				fmt.Fprintf(cmd.ErrOrStderr(), "Created key %s (name %s, role %s) for tenant %s. Its secret is shown only this once:\n", k.ID, k.Name, k.Role, k.Tenant)
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				return nil
			})
		},
	}
	create.Flags().StringVar(&role, "role", "", "what the key may do: check (call /v1/check), admin (manage this tenant) or metrics (read this tenant's series of /metrics)")
	create.Flags().StringVar(&name, "name", "", "name of the key (default: the role and a random suffix)")
	_ = create.MarkFlagRequired("role")

	cmd.AddCommand(create,
		readCmd("list <tenant>", "List a tenant's keys (never their secrets)", exactArgs(1), func(cmd *cobra.Command, args []string, o outputFormat) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				ks, err := c.Keys(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintKeys(w, ks) }, adminapi.NewKeyList(ks))
			})
		}),
		&cobra.Command{
			Use: "revoke <tenant> <key>", Short: "Revoke an API key for good, by ID or by the name of an active key",
			Example: `  sluice key revoke acme key_abcdefghijkl
  sluice key revoke acme web`,
			Args: exactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withBackend(cmd, database, readWrite, func(c adminBackend) error {
					k, err := catalogfile.FindKey(cmd.Context(), c, args[0], args[1])
					if err != nil {
						return err
					}
					if err := c.Revoke(cmd.Context(), args[0], k.ID); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "Revoked key %s (name %s) of tenant %s.\n", k.ID, k.Name, args[0])
					return nil
				})
			},
		},
	)
	return cmd
}

// --- rules

// ruleFlags are the flags of sluice rule set.
type ruleFlags struct {
	route          string
	tokenBuckets   []string
	slidingWindows []string
	fixedWindows   []string
	concurrency    []string
	credits        []string
	failureMode    string
	shadow         bool
	// plans are PLAN:KIND:SPEC, each a limit of a named plan. Without
	// them (and without noPlans) set keeps the stored rule's plans: a
	// check naming a plan must not start failing because a limit was
	// retuned.
	plans   []string
	noPlans bool
}

func newRuleCmd() *cobra.Command {
	var database string
	cmd := groupCmd("rule", "Manage rules (set, list, get, delete)")
	addDatabaseFlag(cmd, &database)

	var rf ruleFlags
	set := &cobra.Command{
		Use:   "set <tenant> <rule> --route PATTERN (--token-bucket C:R/s | --sliding-window L/W | --fixed-window L/W | --concurrency N/TTL)...",
		Short: "Create or replace a rule",
		Long: `Create or replace a rule of a tenant.

--route is the pattern requests are matched against: an exact path
(/api/orders), a prefix (/api/orders*) or * for every route.

Limits (repeatable, all checked together; prefix one with NAME= to name it):
  --token-bucket 10:2/s        bucket of 10, refilled at 2 per second
  --token-bucket burst=100:10/s
  --sliding-window 600/1m      600 per rolling minute
  --fixed-window 100/1s        100 per clock-aligned second
  --fixed-window daily=5000/d  5000 per day (d is 24 hours, w 7 days)
  --fixed-window 1000000/month@Europe/Berlin
                               a calendar month (or day) in a time zone
                               (UTC without @), reset at midnight on the 1st
  --credits 1000/month         a prepaid balance per subject, restored to
                               1000 on the 1st (UTC); 5/12h:add:50 adds 5
                               every 12h up to 50; none: top-ups only
                               (sluice credits add)
  --concurrency 10/30s         10 in flight at once, each lease freed after
                               30s unless released (see docs/holds.md)

Plans (repeatable): named limit sets a check chooses with "plan", each
limit as PLAN:KIND:SPEC, KIND one of the flags above:
  --plan free:sliding-window:minute=100/1m --plan pro:sliding-window:minute=1000/1m
Without --plan a rule that exists keeps its plans; --plan replaces them
all, and --no-plans removes them.

Without --failure-mode the rule is stored without one, and every server
applies its own --default-failure-mode (closed unless set), whether the rule
was written through --server or --database.`,
		Example: `  sluice rule set acme payments --route '/api/payments*' --token-bucket 10:2/s
  sluice rule set acme api --route '*' --token-bucket burst=20:5/s --sliding-window hourly=1000/1h --failure-mode open`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rule, err := rf.rule(args[0], args[1])
			if err != nil {
				return err
			}
			return withBackend(cmd, database, readWrite, func(c adminBackend) error {
				if len(rf.plans) == 0 && !rf.noPlans {
					old, err := c.Rule(cmd.Context(), args[0], args[1])
					switch {
					case err == nil:
						rule.Plans = old.Plans
						if err := rule.Validate(); err != nil {
							return fmt.Errorf("the rule's plans, kept (--plan replaces them, --no-plans removes them): %w", err)
						}
					case !errors.Is(err, sluice.ErrNotFound):
						return err
					}
				}
				stored, err := c.PutRule(cmd.Context(), rule)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Set rule %s of tenant %s: %s\n", stored.Name, stored.Tenant, stored.Describe())
				return nil
			})
		},
	}
	f := set.Flags()
	f.StringVar(&rf.route, "route", "", "route pattern: /exact, /prefix* or *")
	f.StringArrayVar(&rf.tokenBuckets, "token-bucket", nil, "token bucket [NAME=]CAPACITY:RATE/s (repeatable)")
	f.StringArrayVar(&rf.slidingWindows, "sliding-window", nil, "sliding window [NAME=]LIMIT/WINDOW, e.g. 600/1m (repeatable)")
	f.StringArrayVar(&rf.fixedWindows, "fixed-window", nil, "fixed window [NAME=]LIMIT/WINDOW, e.g. 100/1s (repeatable)")
	f.StringArrayVar(&rf.credits, "credits", nil, "credits balance [NAME=]AMOUNT/EVERY[:set|add[:MAX]], e.g. 1000/month, or none (repeatable)")
	f.StringArrayVar(&rf.concurrency, "concurrency", nil, "concurrency limit [NAME=]LIMIT/TTL, e.g. 10/30s: at most LIMIT held at once, each lease freed after TTL (repeatable)")
	f.StringVar(&rf.failureMode, "failure-mode", "", "when the store is down: closed (503), open (allow) or local (in-process limit); default: each server's --default-failure-mode")
	f.BoolVar(&rf.shadow, "shadow", false, "count and report denials but always allow")
	f.StringArrayVar(&rf.plans, "plan", nil, "a limit of a named plan, PLAN:KIND:SPEC, e.g. pro:sliding-window:minute=1000/1m (KIND: token-bucket, sliding-window, fixed-window, concurrency, credits; repeatable); replaces the rule's plans, which are kept without it")
	f.BoolVar(&rf.noPlans, "no-plans", false, "remove the rule's plans (without --plan or --no-plans an existing rule keeps them)")

	cmd.AddCommand(set,
		readCmd("list <tenant>", "List a tenant's rules", exactArgs(1), func(cmd *cobra.Command, args []string, o outputFormat) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				rs, err := c.Rules(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintRules(w, rs) }, adminapi.NewRuleList(rs))
			})
		}),
		readCmd("get <tenant> <rule>", "Show a rule (-o json for the API's spelling of it)", exactArgs(2), func(cmd *cobra.Command, args []string, o outputFormat) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				r, err := c.Rule(cmd.Context(), args[0], args[1])
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { client.PrintRules(w, []sluice.Rule{r}) }, adminapi.NewRule(r))
			})
		}),
		&cobra.Command{
			Use: "delete <tenant> <rule>", Short: "Delete a rule", Args: exactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withBackend(cmd, database, readWrite, func(c adminBackend) error {
					if err := c.DeleteRule(cmd.Context(), args[0], args[1]); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "Deleted rule %s of tenant %s.\n", args[1], args[0])
					return nil
				})
			},
		},
	)
	return cmd
}

// rule builds the rule the flags describe, validated.
func (rf ruleFlags) rule(tenant, name string) (sluice.Rule, error) {
	r := sluice.Rule{Tenant: tenant, Name: name, Route: rf.route,
		FailureMode: sluice.FailureMode(rf.failureMode), Shadow: rf.shadow}
	if rf.route == "" {
		return r, fmt.Errorf("--route is required: an exact path like /api/orders, a prefix like '/api/orders*', or '*'")
	}
	// Empty is stored as none: each server applies its own default.
	if r.FailureMode != "" && !r.FailureMode.Valid() {
		return r, fmt.Errorf("--failure-mode %q is not a failure mode; use closed, open or local", rf.failureMode)
	}
	if rf.noPlans && len(rf.plans) > 0 {
		return r, fmt.Errorf("--plan and --no-plans together: --plan replaces the rule's plans, --no-plans removes them; give one")
	}
	limits, err := rf.limits()
	if err != nil {
		return r, err
	}
	r.Limits = limits
	if len(r.Limits) == 0 {
		return r, fmt.Errorf("a rule needs at least one limit: --token-bucket 10:2/s, --sliding-window 600/1m, --fixed-window 100/1s or --concurrency 10/30s")
	}
	for _, p := range rf.plans {
		plan, kind, spec, ok := cutPlanLimit(p)
		if !ok {
			return r, fmt.Errorf("--plan %q: write PLAN:KIND:SPEC, like pro:sliding-window:minute=1000/1m", p)
		}
		algo := sluice.Algorithm(strings.ReplaceAll(kind, "-", "_"))
		l, err := sluice.ParseLimitSpec(algo, spec)
		if err != nil {
			return r, fmt.Errorf("--plan %q: %w", p, err)
		}
		if r.Plans == nil {
			r.Plans = sluice.Plans{}
		}
		r.Plans[plan] = append(r.Plans[plan], l)
	}
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// cutPlanLimit splits PLAN:KIND:SPEC.
func cutPlanLimit(s string) (plan, kind, spec string, ok bool) {
	plan, rest, ok1 := strings.Cut(s, ":")
	kind, spec, ok2 := strings.Cut(rest, ":")
	return plan, kind, spec, ok1 && ok2 && plan != "" && kind != "" && spec != ""
}

// limits are the limits of the flags, without their route.
func (rf ruleFlags) limits() ([]sluice.Limit, error) {
	var out []sluice.Limit
	for _, group := range []struct {
		specs []string
		algo  sluice.Algorithm
	}{{rf.tokenBuckets, sluice.AlgorithmTokenBucket}, {rf.slidingWindows, sluice.AlgorithmSlidingWindow},
		{rf.fixedWindows, sluice.AlgorithmFixedWindow}, {rf.concurrency, sluice.AlgorithmConcurrency}, {rf.credits, sluice.AlgorithmCredits}} {
		for _, spec := range group.specs {
			l, err := sluice.ParseLimitSpec(group.algo, spec)
			if err != nil {
				return out, fmt.Errorf("--%s %q: %w", strings.ReplaceAll(string(group.algo), "_", "-"), spec, err)
			}
			out = append(out, l)
		}
	}
	return out, nil
}
