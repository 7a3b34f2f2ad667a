// Package catalogfile reads and writes catalog files, and works out what
// applying one changes. A catalog file is the declarative form of tenants,
// their keys and rules (docs/catalog-files.md): sluice export writes one,
// sluice apply makes the catalog match one. Rules are spelled as the admin API's PUT body
// (adminapi.RuleSpec) and read by the same code, so a file means what the
// same PUT would.
package catalogfile

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

// File is the document: every tenant it manages.
type File struct {
	Tenants []TenantEntry `yaml:"tenants"`
}

// TenantEntry is a tenant of a file.
type TenantEntry struct {
	Name string `yaml:"name"`
	// Status is active (the default, left out on export) or suspended.
	Status string `yaml:"status,omitempty"`
	// Keys are named only: a secret never appears in a file.
	Keys  []KeyEntry  `yaml:"keys,omitempty"`
	Rules []RuleEntry `yaml:"rules,omitempty"`
}

// KeyEntry is a key of a tenant, by name and role.
type KeyEntry struct {
	Name string `yaml:"name"`
	Role string `yaml:"role"`
}

// RuleEntry is a rule: its name, and what the admin API's PUT of it sets
// (a failure mode of none, and shadow false, are left out on export).
type RuleEntry struct {
	Name              string `yaml:"name"`
	adminapi.RuleSpec `yaml:",inline"`
	// Overrides are the rule's per-subject overrides, each as the admin
	// API's PUT of it.
	Overrides []OverrideEntry `yaml:"overrides,omitempty"`
}

// OverrideEntry is an override of a rule: its name and what the admin
// API's PUT of it sets.
type OverrideEntry struct {
	Name                  string `yaml:"name"`
	adminapi.OverrideSpec `yaml:",inline"`
}

// Desired is a tenant of a file, validated, in domain types.
type Desired struct {
	Name   string
	Status sluice.TenantStatus
	Keys   []KeyEntry
	Rules  []sluice.Rule
}

// Parse reads and validates a catalog file. Every error names
// the file, the entry and the field.
func Parse(name string, data []byte) ([]Desired, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		// An empty file is what a failed "sluice export > file" leaves:
		// reading it as "no tenants" would let --prune delete them all.
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty (no YAML document); a catalog file lists its tenants under \"tenants\"", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := make([]Desired, 0, len(f.Tenants))
	seen := map[string]bool{}
	for i, te := range f.Tenants {
		where := fmt.Sprintf("%s: tenants[%d]", name, i)
		if err := sluice.TenantName(te.Name).Validate(); err != nil {
			return nil, fmt.Errorf("%s.name: %w", where, err)
		}
		where = fmt.Sprintf("%s (%s)", where, te.Name)
		if seen[te.Name] {
			return nil, fmt.Errorf("%s.name: tenant %s is listed twice", where, te.Name)
		}
		seen[te.Name] = true
		t := Desired{Name: te.Name, Status: sluice.TenantStatus(te.Status)}
		switch t.Status {
		case "":
			t.Status = sluice.TenantActive
		case sluice.TenantActive, sluice.TenantSuspended:
		default:
			return nil, fmt.Errorf("%s.status: %q is not a status; use active or suspended", where, te.Status)
		}
		keyNames := map[string]bool{}
		for j, k := range te.Keys {
			kw := fmt.Sprintf("%s.keys[%d]", where, j)
			if err := sluice.KeyName(k.Name).Validate(); err != nil {
				return nil, fmt.Errorf("%s.name: %w", kw, err)
			}
			kw = fmt.Sprintf("%s (%s)", kw, k.Name)
			if keyNames[k.Name] {
				return nil, fmt.Errorf("%s.name: key %s is listed twice", kw, k.Name)
			}
			keyNames[k.Name] = true
			if err := sluice.Role(k.Role).Validate(); err != nil {
				return nil, fmt.Errorf("%s.role: %w", kw, err)
			}
			t.Keys = append(t.Keys, k)
		}
		ruleNames, routes := map[string]bool{}, map[string]string{}
		for j, re := range te.Rules {
			rw := fmt.Sprintf("%s.rules[%d]", where, j)
			if err := sluice.RuleName(re.Name).Validate(); err != nil {
				return nil, fmt.Errorf("%s.name: %w", rw, err)
			}
			rw = fmt.Sprintf("%s (%s)", rw, re.Name)
			if ruleNames[re.Name] {
				return nil, fmt.Errorf("%s.name: rule %s is listed twice", rw, re.Name)
			}
			ruleNames[re.Name] = true
			if other, dup := routes[re.Route]; dup {
				return nil, fmt.Errorf("%s.route: rule %s already uses route %s", rw, other, re.Route)
			}
			routes[re.Route] = re.Name
			r, err := re.rule(te.Name, rw)
			if err != nil {
				return nil, err
			}
			t.Rules = append(t.Rules, r)
		}
		out = append(out, t)
	}
	return out, nil
}

// rule reads the entry as the admin API reads a PUT of it.
func (re RuleEntry) rule(tenant, where string) (sluice.Rule, error) {
	r := sluice.Rule{Tenant: tenant, Name: re.Name, Route: re.Route, FailureMode: sluice.FailureMode(re.FailureMode), Shadow: re.Shadow}
	if err := sluice.RoutePattern(re.Route).Validate(); err != nil {
		return r, fmt.Errorf("%s.route: %w", where, err)
	}
	if r.FailureMode != "" && !r.FailureMode.Valid() {
		return r, fmt.Errorf("%s.failure_mode: %q is not a failure mode; use closed, open or local, or leave it out for the server's default", where, re.FailureMode)
	}
	if len(re.Limits) == 0 {
		return r, fmt.Errorf("%s.limits: a rule needs at least one limit", where)
	}
	for k, le := range re.Limits {
		l, err := le.ToLimit()
		if err != nil {
			return r, fmt.Errorf("%s.limits[%d]: %w", where, k, err)
		}
		r.Limits = append(r.Limits, l)
	}
	plans, err := adminapi.ToPlans(re.Plans)
	if err != nil {
		return r, fmt.Errorf("%s.plans: %w", where, err)
	}
	r.Plans = plans
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%s: %w", where, err)
	}
	names := map[string]bool{}
	for k, oe := range re.Overrides {
		ow := fmt.Sprintf("%s.overrides[%d]", where, k)
		if names[oe.Name] {
			return r, fmt.Errorf("%s.name: override %s is listed twice", ow, oe.Name)
		}
		names[oe.Name] = true
		o, err := oe.ToOverride(tenant, re.Name, oe.Name)
		if err == nil {
			err = r.ValidateOverrideFor(o)
		}
		if err != nil {
			return r, fmt.Errorf("%s (%s): %w", ow, oe.Name, err)
		}
		r.Overrides = append(r.Overrides, o)
	}
	if err := sluice.ValidateOverrides(r.Overrides); err != nil {
		return r, fmt.Errorf("%s.overrides: %w", where, err)
	}
	return r, nil
}

// Current is a tenant as the catalog holds it now.
type Current struct {
	sluice.Tenant
	Keys  []sluice.APIKey // active keys only: revoked ones are history
	Rules []sluice.Rule
}

// Export writes the current catalog in the file format, in a stable
// order so two exports of one catalog are byte for byte equal.
func Export(ts []Current) File {
	f := File{Tenants: make([]TenantEntry, 0, len(ts))}
	for _, t := range ts {
		te := TenantEntry{Name: t.Name}
		if t.Status != sluice.TenantActive {
			te.Status = string(t.Status)
		}
		seen := map[string]bool{}
		for _, k := range t.Keys {
			// Active keys may share a name; the file names keys, so it
			// lists the name once.
			if !seen[k.Name] {
				seen[k.Name] = true
				te.Keys = append(te.Keys, KeyEntry{Name: k.Name, Role: string(k.Role)})
			}
		}
		slices.SortFunc(te.Keys, func(a, b KeyEntry) int { return cmp.Compare(a.Name, b.Name) })
		for _, r := range t.Rules {
			re := RuleEntry{Name: r.Name, RuleSpec: adminapi.NewRule(r).Spec()}
			for _, o := range r.Overrides {
				re.Overrides = append(re.Overrides, OverrideEntry{Name: o.Name, OverrideSpec: adminapi.NewOverride(o).Spec()})
			}
			slices.SortFunc(re.Overrides, func(a, b OverrideEntry) int { return cmp.Compare(a.Name, b.Name) })
			te.Rules = append(te.Rules, re)
		}
		slices.SortFunc(te.Rules, func(a, b RuleEntry) int { return cmp.Compare(a.Name, b.Name) })
		f.Tenants = append(f.Tenants, te)
	}
	slices.SortFunc(f.Tenants, func(a, b TenantEntry) int { return cmp.Compare(a.Name, b.Name) })
	return f
}
