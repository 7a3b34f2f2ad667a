package main

// sluice apply makes the catalog match a catalog file; sluice export writes
// the catalog as one. Both go through adminBackend, so they work on the
// catalog database and through a server's admin API alike, with the API's
// meaning of every field.

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
)

func init() {
	rootCmd.AddCommand(newApplyCmd(), newExportCmd())
}

func newExportCmd() *cobra.Command {
	var database, file string
	cmd := &cobra.Command{
		Use:   "export [-f FILE]",
		Short: "Write the catalog (tenants, key names, rules) as a catalog file for sluice apply",
		Long: `Write every tenant with its active keys' names and roles and its rules, in
the format sluice apply reads (docs/catalog-files.md). Secrets are never written:
the catalog holds only their hashes.`,
		Example: `  sluice export --server http://localhost:8080 > catalog.yaml
  sluice export --database postgres://... -f catalog.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBackend(cmd, database, readOnly, func(c adminBackend) error {
				ts, err := readCatalog(cmd.Context(), c)
				if err != nil {
					return err
				}
				data, err := yaml.Marshal(catalogFileOf(ts))
				if err != nil {
					return err
				}
				if file == "" || file == "-" {
					_, err = cmd.OutOrStdout().Write(data)
					return err
				}
				return os.WriteFile(file, data, 0o644)
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	cmd.Flags().StringVarP(&file, "file", "f", "", "write to this file instead of stdout")
	return cmd
}

func newApplyCmd() *cobra.Command {
	var (
		database, file string
		dryRun, prune  bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--dry-run] [--prune]",
		Short: "Make the catalog match a catalog file: create or update its tenants, keys and rules",
		Long: `Make the catalog match a catalog file (docs/catalog-files.md): create the tenants,
keys and rules it lists, update the tenants and rules that differ, and leave
the rest alone, unless --prune, which also deletes the rules and tenants and
revokes the keys the file does not list (only within tenants the file lists,
for rules and keys). Applying the same file twice changes nothing.

Every change is printed (+ create, ~ update, - delete). A created key's
secret is printed once, on stdout; the file never holds secrets.

The whole file is read and checked, and the changes worked out, before the
first write. The catalog has no transaction across calls: if a write fails
(a route taken, the server gone), apply stops there, says what it applied
and what it did not, and running it again finishes the job.`,
		Example: `  sluice apply -f catalog.yaml --dry-run
  sluice apply -f catalog.yaml --server http://sluice.internal:8080
  sluice apply -f catalog.yaml --prune --database postgres://...`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return fmt.Errorf("apply needs -f FILE: a catalog file as sluice export writes it (docs/catalog-files.md)")
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(cmd.InOrStdin())
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("read the catalog file: %w", err)
			}
			desired, err := parseCatalogFile(file, data)
			if err != nil {
				return err
			}
			acc := readWrite
			if dryRun {
				acc = readOnly
			}
			return withBackend(cmd, database, acc, func(c adminBackend) error {
				current, err := readCatalog(cmd.Context(), c)
				if err != nil {
					return err
				}
				p, err := planApply(desired, current, prune)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if len(p) == 0 {
					fmt.Fprintln(out, "No changes: the catalog matches the file.")
					return nil
				}
				if dryRun {
					for _, s := range p {
						fmt.Fprintln(out, s.what)
					}
					fmt.Fprintf(out, "Dry run: %d changes not applied.\n", len(p))
					return nil
				}
				for i, s := range p {
					if err := s.do(cmd.Context(), c, out); err != nil {
						return fmt.Errorf("%s: %w\napplied %d of %d changes; the rest are not applied (run apply again once the cause is fixed)", s.what, unreachable(err), i, len(p))
					}
					fmt.Fprintln(out, s.what)
				}
				fmt.Fprintf(out, "Applied %d changes.\n", len(p))
				return nil
			})
		},
	}
	addDatabaseFlag(cmd, &database)
	cmd.Flags().StringVarP(&file, "file", "f", "", "the catalog file (- for stdin)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes without making them")
	cmd.Flags().BoolVar(&prune, "prune", false, "also delete tenants and rules, and revoke keys, that the file does not list")
	return cmd
}

// readCatalog reads every tenant with its active keys and its rules.
func readCatalog(ctx context.Context, c adminBackend) ([]currentTenant, error) {
	ts, err := c.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]currentTenant, 0, len(ts))
	for _, t := range ts {
		ct := currentTenant{Tenant: t}
		ks, err := c.Keys(ctx, t.Name)
		if err != nil {
			return nil, fmt.Errorf("read the keys of tenant %s: %w", t.Name, err)
		}
		for _, k := range ks {
			if k.RevokedAt == nil {
				ct.Keys = append(ct.Keys, k)
			}
		}
		if ct.Rules, err = c.Rules(ctx, t.Name); err != nil {
			return nil, fmt.Errorf("read the rules of tenant %s: %w", t.Name, err)
		}
		out = append(out, ct)
	}
	return out, nil
}

// step is one change of an apply: what it says, and how to make it.
type step struct {
	what string
	do   func(ctx context.Context, c adminBackend, out io.Writer) error
}

// planApply works out the changes that make current match desired, in an
// order that keeps every intermediate catalog valid: tenants first, then
// their rules and keys, and deletions last, so that no route is left
// unlimited while a rule replaces another.
func planApply(desired []desiredTenant, current []currentTenant, prune bool) ([]step, error) {
	byName := map[string]currentTenant{}
	for _, t := range current {
		byName[t.Name] = t
	}
	var creates, updates, deletes []step
	for _, d := range desired {
		cur, exists := byName[d.Name]
		if !exists {
			creates = append(creates, step{"+ tenant " + d.Name, func(ctx context.Context, c adminBackend, _ io.Writer) error {
				_, err := c.CreateTenant(ctx, d.Name)
				return err
			}})
			cur.Status = sluice.TenantActive
		}
		if cur.Status != d.Status {
			updates = append(updates, step{fmt.Sprintf("~ tenant %s: status %s -> %s", d.Name, cur.Status, d.Status), func(ctx context.Context, c adminBackend, _ io.Writer) error {
				_, err := c.SetTenantStatus(ctx, d.Name, d.Status)
				return err
			}})
		}
		rules := map[string]sluice.Rule{}
		for _, r := range cur.Rules {
			rules[r.Name] = r
		}
		for _, r := range d.Rules {
			old, had := rules[r.Name]
			delete(rules, r.Name)
			if had && sameRuleSpec(old, r) {
				continue
			}
			what := fmt.Sprintf("+ rule %s/%s: %s", d.Name, r.Name, describeRule(r))
			if had {
				what = fmt.Sprintf("~ rule %s/%s: %s\n    was: %s", d.Name, r.Name, describeRule(r), describeRule(old))
			}
			updates = append(updates, step{what, func(ctx context.Context, c adminBackend, _ io.Writer) error {
				_, err := c.PutRule(ctx, r)
				return err
			}})
		}
		keys := map[string][]sluice.APIKey{}
		for _, k := range cur.Keys {
			keys[k.Name] = append(keys[k.Name], k)
		}
		for _, k := range d.Keys {
			have := keys[k.Name]
			delete(keys, k.Name)
			if len(have) == 0 {
				updates = append(updates, step{fmt.Sprintf("+ key %s/%s (role %s)", d.Name, k.Name, k.Role), func(ctx context.Context, c adminBackend, out io.Writer) error {
					created, secret, err := c.NewKey(ctx, d.Name, k.Name, sluice.Role(k.Role))
					if err != nil {
						return err
					}
					fmt.Fprintf(out, "Created key %s (name %s) of tenant %s; its secret, shown only this once: %s\n", created.ID, k.Name, d.Name, secret)
					return nil
				}})
				continue
			}
			for _, h := range have {
				if string(h.Role) != k.Role {
					return nil, fmt.Errorf("key %s of tenant %s has role %s, the file says %s; a key's role cannot change: revoke it (sluice key revoke %s %s) and apply again, or give the new key another name",
						k.Name, d.Name, h.Role, k.Role, d.Name, h.ID)
				}
			}
		}
		if !prune {
			continue
		}
		for _, name := range sortedKeys(rules) {
			deletes = append(deletes, step{fmt.Sprintf("- rule %s/%s", d.Name, name), func(ctx context.Context, c adminBackend, _ io.Writer) error {
				return c.DeleteRule(ctx, d.Name, name)
			}})
		}
		for _, name := range sortedKeys(keys) {
			for _, k := range keys[name] {
				deletes = append(deletes, step{fmt.Sprintf("- key %s/%s (%s, revoked)", d.Name, name, k.ID), func(ctx context.Context, c adminBackend, _ io.Writer) error {
					return c.Revoke(ctx, d.Name, k.ID)
				}})
			}
		}
	}
	if prune {
		listed := map[string]bool{}
		for _, d := range desired {
			listed[d.Name] = true
		}
		for _, t := range current {
			if !listed[t.Name] {
				deletes = append(deletes, step{fmt.Sprintf("- tenant %s (with its %d keys and %d rules)", t.Name, len(t.Keys), len(t.Rules)), func(ctx context.Context, c adminBackend, _ io.Writer) error {
					return c.DeleteTenant(ctx, t.Name)
				}})
			}
		}
	}
	return slices.Concat(creates, updates, deletes), nil
}

// sameRuleSpec reports whether two rules say the same, whenever written.
func sameRuleSpec(a, b sluice.Rule) bool {
	return a.Route == b.Route && a.FailureMode == b.FailureMode && a.Shadow == b.Shadow && slices.Equal(a.Limits, b.Limits)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
