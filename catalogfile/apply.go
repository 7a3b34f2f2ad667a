package catalogfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
)

// Admin is what reading and applying a catalog need, in domain types: the
// catalog database itself or a server's admin API.
type Admin interface {
	CreateTenant(ctx context.Context, name string) (sluice.Tenant, error)
	Tenants(ctx context.Context) ([]sluice.Tenant, error)
	SetTenantStatus(ctx context.Context, name string, status sluice.TenantStatus) (sluice.Tenant, error)
	DeleteTenant(ctx context.Context, name string) error
	// NewKey creates a key and returns it with its secret.
	NewKey(ctx context.Context, tenant, name string, role sluice.Role) (sluice.APIKey, string, error)
	Keys(ctx context.Context, tenant string) ([]sluice.APIKey, error)
	Revoke(ctx context.Context, tenant, id string) error
	PutRule(ctx context.Context, r sluice.Rule) (sluice.Rule, error)
	Rules(ctx context.Context, tenant string) ([]sluice.Rule, error)
	DeleteRule(ctx context.Context, tenant, name string) error
	PutOverride(ctx context.Context, o sluice.Override) (sluice.Override, error)
	Overrides(ctx context.Context, tenant, rule string) ([]sluice.Override, error)
	DeleteOverride(ctx context.Context, tenant, rule, name string) error
}

// Read reads every tenant with its active keys and its rules.
func Read(ctx context.Context, c Admin) ([]Current, error) {
	ts, err := c.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Current, 0, len(ts))
	for _, t := range ts {
		ct := Current{Tenant: t}
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
		for i, r := range ct.Rules {
			if ct.Rules[i].Overrides, err = c.Overrides(ctx, t.Name, r.Name); err != nil {
				return nil, fmt.Errorf("read the overrides of rule %s/%s: %w", t.Name, r.Name, err)
			}
		}
		out = append(out, ct)
	}
	return out, nil
}

// Step is one change of an apply: what it says, and how to make it.
type Step struct {
	// What says the change: "+ tenant acme", "~ rule acme/api: ...".
	What string
	// Do makes it; a created key's secret is printed on out.
	Do func(ctx context.Context, c Admin, out io.Writer) error
	// DeletesTenant names the tenant this step deletes, if it does: the
	// caller asks for a confirmation before any of those.
	DeletesTenant string
}

// ErrPruneWithoutTenants refuses --prune of a file that lists no tenant:
// it would delete every tenant, which is what an empty or truncated file
// would otherwise do by mistake.
var ErrPruneWithoutTenants = errors.New("--prune of a file that lists no tenant would delete every tenant; refused, nothing changed (list at least one tenant, or delete tenants one by one with sluice tenant delete)")

// Plan works out the changes that make current match desired, in an
// order that keeps every intermediate catalog valid: tenants first, then
// overrides the file drops (with prune), their rules and keys, the rules'
// overrides, and deletions last, so that no route is left unlimited while a
// rule replaces another, and no rule is replaced while an override still
// sets a limit it drops.
func Plan(desired []Desired, current []Current, prune bool) ([]Step, error) {
	if prune && len(desired) == 0 {
		return nil, ErrPruneWithoutTenants
	}
	byName := map[string]Current{}
	for _, t := range current {
		byName[t.Name] = t
	}
	var creates, dropOverrides, updates, putOverrides, deletes []Step
	for _, d := range desired {
		cur, exists := byName[d.Name]
		if !exists {
			creates = append(creates, Step{What: "+ tenant " + d.Name, Do: func(ctx context.Context, c Admin, _ io.Writer) error {
				_, err := c.CreateTenant(ctx, d.Name)
				return err
			}})
			cur.Status = sluice.TenantActive
		}
		if cur.Status != d.Status {
			updates = append(updates, Step{What: fmt.Sprintf("~ tenant %s: status %s -> %s", d.Name, cur.Status, d.Status), Do: func(ctx context.Context, c Admin, _ io.Writer) error {
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
			dropOverrides, putOverrides = planOverrides(d.Name, r, old.Overrides, prune, dropOverrides, putOverrides)
			if had && sameRuleSpec(old, r) {
				continue
			}
			what := fmt.Sprintf("+ rule %s/%s: %s", d.Name, r.Name, r.Describe())
			if had {
				what = fmt.Sprintf("~ rule %s/%s: %s\n    was: %s", d.Name, r.Name, r.Describe(), old.Describe())
			}
			updates = append(updates, Step{What: what, Do: func(ctx context.Context, c Admin, _ io.Writer) error {
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
				updates = append(updates, Step{What: fmt.Sprintf("+ key %s/%s (role %s)", d.Name, k.Name, k.Role), Do: func(ctx context.Context, c Admin, out io.Writer) error {
					created, secret, err := c.NewKey(ctx, d.Name, k.Name, sluice.Role(k.Role))
					if err != nil {
						return err
					}
					fmt.Fprintf(out, "Created key %s (name %s) of tenant %s; its secret, shown only this once: %s\n", created.ID, k.Name, d.Name, secret)
					// Out the moment the key exists: a secret left in a
					// buffer is lost by a kill, and the catalog holds only
					// its hash.
					if f, ok := out.(interface{ Flush() error }); ok {
						return f.Flush()
					}
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
			deletes = append(deletes, Step{What: fmt.Sprintf("- rule %s/%s", d.Name, name), Do: func(ctx context.Context, c Admin, _ io.Writer) error {
				return c.DeleteRule(ctx, d.Name, name)
			}})
		}
		for _, name := range sortedKeys(keys) {
			for _, k := range keys[name] {
				deletes = append(deletes, Step{What: fmt.Sprintf("- key %s/%s (%s, revoked)", d.Name, name, k.ID), Do: func(ctx context.Context, c Admin, _ io.Writer) error {
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
				deletes = append(deletes, Step{What: fmt.Sprintf("- tenant %s (with its %d keys and %d rules)", t.Name, len(t.Keys), len(t.Rules)), Do: func(ctx context.Context, c Admin, _ io.Writer) error {
					return c.DeleteTenant(ctx, t.Name)
				}, DeletesTenant: t.Name})
			}
		}
	}
	return slices.Concat(creates, dropOverrides, updates, putOverrides, deletes), nil
}

// planOverrides adds the steps that make rule r's overrides (cur now)
// those of the file: puts of new and changed ones, and with prune deletes
// of those the file leaves out.
func planOverrides(tenant string, r sluice.Rule, cur []sluice.Override, prune bool, drops, puts []Step) ([]Step, []Step) {
	have := map[string]sluice.Override{}
	for _, o := range cur {
		have[o.Name] = o
	}
	for _, o := range r.Overrides {
		old, had := have[o.Name]
		delete(have, o.Name)
		if had && sameOverrideSpec(old, o) {
			continue
		}
		sign := "+"
		if had {
			sign = "~"
		}
		puts = append(puts, Step{What: fmt.Sprintf("%s override %s/%s/%s: %s", sign, tenant, r.Name, o.Name, describeOverride(o)),
			Do: func(ctx context.Context, c Admin, _ io.Writer) error {
				_, err := c.PutOverride(ctx, o)
				return err
			}})
	}
	if prune {
		for _, name := range sortedKeys(have) {
			drops = append(drops, Step{What: fmt.Sprintf("- override %s/%s/%s", tenant, r.Name, name), Do: func(ctx context.Context, c Admin, _ io.Writer) error {
				return c.DeleteOverride(ctx, tenant, r.Name, name)
			}})
		}
	}
	return drops, puts
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

// sameRuleSpec reports whether two rules say the same, whenever written
// (their overrides are compared apart).
func sameRuleSpec(a, b sluice.Rule) bool {
	return a.Route == b.Route && a.FailureMode == b.FailureMode && a.Shadow == b.Shadow && slices.Equal(a.Limits, b.Limits) &&
		maps.EqualFunc(a.Plans, b.Plans, slices.Equal)
}

func sameOverrideSpec(a, b sluice.Override) bool {
	return a.ExpiresAt.Equal(b.ExpiresAt) && slices.Equal(a.Subjects, b.Subjects) && slices.Equal(a.Limits, b.Limits)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Apply makes the changes of a plan in order, writing each to out as it is
// made (a created key's secret with it), then how many were applied; with
// dryRun it only writes them. The catalog has no transaction across calls,
// so a failed step stops the run with an error that says how many steps
// were applied: the plan of a second run is the rest. explain, if set,
// rewrites a step's error first (the command says a server it cannot reach
// in one sentence).
func Apply(ctx context.Context, c Admin, plan []Step, out io.Writer, dryRun bool, explain func(error) error) error {
	if len(plan) == 0 {
		fmt.Fprintln(out, "No changes: the catalog matches the file.")
		return nil
	}
	if dryRun {
		for _, s := range plan {
			fmt.Fprintln(out, s.What)
		}
		fmt.Fprintf(out, "Dry run: %d changes not applied.\n", len(plan))
		return nil
	}
	for i, s := range plan {
		if err := s.Do(ctx, c, out); err != nil {
			if explain != nil {
				err = explain(err)
			}
			return fmt.Errorf("%s: %w\napplied %d of %d changes; the rest are not applied (run apply again once the cause is fixed)", s.What, err, i, len(plan))
		}
		fmt.Fprintln(out, s.What)
	}
	fmt.Fprintf(out, "Applied %d changes.\n", len(plan))
	return nil
}
