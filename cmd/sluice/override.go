package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

// overrideFlags are the flags of sluice override set.
type overrideFlags struct {
	ruleFlags
	subjects  []string
	expiresAt string
	forPeriod string
}

func newOverrideCmd() *cobra.Command {
	var database string
	cmd := groupCmd("override", "Manage a rule's per-subject overrides (set, list, get, delete)")
	addDatabaseFlag(cmd, &database)

	var of overrideFlags
	set := &cobra.Command{
		Use:   "set <tenant> <rule> <override> --subject S... (--token-bucket ... | --sliding-window ... | --fixed-window ... | --concurrency ...)... [--for 7d | --expires-at TIME]",
		Short: "Create or replace an override of a rule",
		Long: `Give the subjects an override names other limits on one rule, instead of
the rule's or their plan's, until it expires.

--subject (repeatable) is an exact subject (acme) or a prefix pattern
(vip-*, which matches vip- itself too). An exact value wins over the longest
matching prefix, which wins over the rule. Two overrides of one rule may not
claim the same value or pattern.

Limits take the flags of sluice rule set, and must be named like limits the
rule has (in its own limits or a plan): counters carry over by name,
algorithm and window, so what a subject already spent still counts.

--for 7d or --expires-at 2026-12-09T00:00:00Z ends it on every instance at
that time, with no reload; without either it never expires. Once expired,
the next most specific match applies.`,
		Example: `  sluice override set acme search launch-week --subject cust-17 --sliding-window minute=10000/1m --for 7d
  sluice override set acme search partners --subject 'partner-*' --sliding-window minute=5000/1m`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := of.override(args[0], args[1], args[2], time.Now())
			if err != nil {
				return err
			}
			return withBackend(cmd, database, readWrite, func(c adminBackend) error {
				stored, err := c.PutOverride(cmd.Context(), o)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Set override %s of rule %s of tenant %s: %s\n", stored.Name, stored.Rule, stored.Tenant, describeOverride(stored))
				return nil
			})
		},
	}
	f := set.Flags()
	f.StringArrayVar(&of.subjects, "subject", nil, "an exact subject or a prefix* pattern (repeatable)")
	f.StringArrayVar(&of.tokenBuckets, "token-bucket", nil, "token bucket [NAME=]CAPACITY:RATE/s (repeatable)")
	f.StringArrayVar(&of.slidingWindows, "sliding-window", nil, "sliding window [NAME=]LIMIT/WINDOW, e.g. 600/1m (repeatable)")
	f.StringArrayVar(&of.fixedWindows, "fixed-window", nil, "fixed window [NAME=]LIMIT/WINDOW, e.g. 100/1s (repeatable)")
	f.StringArrayVar(&of.concurrency, "concurrency", nil, "concurrency limit [NAME=]LIMIT/TTL (repeatable)")
	f.StringVar(&of.expiresAt, "expires-at", "", "when it stops applying, RFC 3339 (2026-12-09T00:00:00Z); default never")
	f.StringVar(&of.forPeriod, "for", "", "how long from now it applies (1h, 7d, 2w); default for ever")

	cmd.AddCommand(set,
		readCmd("list <tenant> <rule>", "List a rule's overrides, expired ones included", exactArgs(2), func(cmd *cobra.Command, args []string, o outputFormat) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				os, err := c.Overrides(cmd.Context(), args[0], args[1])
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { printOverrides(w, os, time.Now()) }, adminapi.NewOverrideList(os))
			})
		}),
		readCmd("get <tenant> <rule> <override>", "Show an override (-o json for the API's spelling of it)", exactArgs(3), func(cmd *cobra.Command, args []string, o outputFormat) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				ov, err := c.Override(cmd.Context(), args[0], args[1], args[2])
				if err != nil {
					return err
				}
				return render(cmd.OutOrStdout(), o, func(w io.Writer) { printOverrides(w, []sluice.Override{ov}, time.Now()) }, adminapi.NewOverride(ov))
			})
		}),
		&cobra.Command{
			Use: "delete <tenant> <rule> <override>", Short: "Delete an override", Args: exactArgs(3),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withBackend(cmd, database, readWrite, func(c adminBackend) error {
					if err := c.DeleteOverride(cmd.Context(), args[0], args[1], args[2]); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "Deleted override %s of rule %s of tenant %s.\n", args[2], args[1], args[0])
					return nil
				})
			},
		},
	)
	return cmd
}

// override builds the override the flags describe, validated alone (the
// catalog checks it against its rule).
func (of overrideFlags) override(tenant, rule, name string, now time.Time) (sluice.Override, error) {
	o := sluice.Override{Tenant: tenant, Rule: rule, Name: name, Subjects: of.subjects}
	if len(of.subjects) == 0 {
		return o, fmt.Errorf("--subject is required: an exact subject like acme, or a pattern like 'vip-*' (repeatable)")
	}
	limits, err := of.limits()
	if err != nil {
		return o, err
	}
	if len(limits) == 0 {
		return o, fmt.Errorf("an override needs at least one limit: --token-bucket, --sliding-window, --fixed-window or --concurrency, named like the rule's")
	}
	o.Limits = limits
	switch {
	case of.expiresAt != "" && of.forPeriod != "":
		return o, fmt.Errorf("give --expires-at or --for, not both")
	case of.expiresAt != "":
		t, err := time.Parse(time.RFC3339Nano, of.expiresAt)
		if err != nil {
			return o, fmt.Errorf("--expires-at %q is not an RFC 3339 time like 2026-12-09T00:00:00Z", of.expiresAt)
		}
		o.ExpiresAt = t.UTC()
	case of.forPeriod != "":
		d, err := sluice.ParseWindow(of.forPeriod)
		if err != nil {
			return o, fmt.Errorf("--for %q: %w", of.forPeriod, err)
		}
		o.ExpiresAt = now.Add(d).UTC()
	}
	if !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(now) {
		return o, fmt.Errorf("--expires-at %s is in the past; an override must expire later (sluice override delete removes one)", o.ExpiresAt.Format(time.RFC3339))
	}
	return o, o.Validate()
}

func describeOverride(o sluice.Override) string {
	parts := make([]string, 0, len(o.Limits))
	for _, l := range o.Limits {
		parts = append(parts, l.String())
	}
	s := fmt.Sprintf("subjects %s; %s", strings.Join(o.Subjects, ", "), strings.Join(parts, ", "))
	if !o.ExpiresAt.IsZero() {
		s += "; until " + o.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return s
}

func printOverrides(w io.Writer, os []sluice.Override, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSUBJECTS\tLIMITS\tEXPIRES")
	for _, o := range os {
		parts := make([]string, 0, len(o.Limits))
		for _, l := range o.Limits {
			parts = append(parts, l.String())
		}
		expires := "never"
		if !o.ExpiresAt.IsZero() {
			expires = o.ExpiresAt.UTC().Format(time.RFC3339)
			if !o.ActiveAt(now) {
				expires += " (expired)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Name, strings.Join(o.Subjects, ", "), strings.Join(parts, "; "), expires)
	}
	tw.Flush()
}
