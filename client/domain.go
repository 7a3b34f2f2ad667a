package client

import (
	"context"
	"fmt"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

// Domain is the admin API in domain types (sluice.Tenant, sluice.Rule, ...),
// as the catalog database speaks them: a command written against one works
// on the other. Its errors are Admin's.
type Domain struct{ a *Admin }

// Domain is a in domain types.
func (a *Admin) Domain() Domain { return Domain{a} }

func (b Domain) CreateTenant(ctx context.Context, name string) (sluice.Tenant, error) {
	t, err := b.a.CreateTenant(ctx, name)
	return t.ToTenant(), err
}

func (b Domain) Tenants(ctx context.Context) ([]sluice.Tenant, error) {
	ts, err := b.a.Tenants(ctx)
	out := make([]sluice.Tenant, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.ToTenant())
	}
	return out, err
}

func (b Domain) SetTenantStatus(ctx context.Context, name string, status sluice.TenantStatus) (sluice.Tenant, error) {
	t, err := b.a.SetTenantStatus(ctx, name, string(status))
	return t.ToTenant(), err
}

func (b Domain) DeleteTenant(ctx context.Context, name string) error {
	return b.a.DeleteTenant(ctx, name)
}

// NewKey creates a key and returns it with its secret.
func (b Domain) NewKey(ctx context.Context, tenant, name string, role sluice.Role) (sluice.APIKey, string, error) {
	k, err := b.a.CreateKey(ctx, tenant, name, string(role))
	return k.ToKey(), k.Secret, err
}

func (b Domain) Keys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	ks, err := b.a.Keys(ctx, tenant)
	out := make([]sluice.APIKey, 0, len(ks))
	for _, k := range ks {
		out = append(out, k.ToKey())
	}
	return out, err
}

func (b Domain) Revoke(ctx context.Context, tenant, id string) error {
	return b.a.RevokeKey(ctx, tenant, id)
}

func (b Domain) PutRule(ctx context.Context, r sluice.Rule) (sluice.Rule, error) {
	stored, err := b.a.PutRule(ctx, adminapi.NewRule(r))
	if err != nil {
		return sluice.Rule{}, err
	}
	return fromAPIRule(stored)
}

func (b Domain) Rules(ctx context.Context, tenant string) ([]sluice.Rule, error) {
	rs, err := b.a.Rules(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]sluice.Rule, 0, len(rs))
	for _, r := range rs {
		dr, err := fromAPIRule(r)
		if err != nil {
			return nil, err
		}
		out = append(out, dr)
	}
	return out, nil
}

func (b Domain) Rule(ctx context.Context, tenant, name string) (sluice.Rule, error) {
	r, err := b.a.Rule(ctx, tenant, name)
	if err != nil {
		return sluice.Rule{}, err
	}
	return fromAPIRule(r)
}

func (b Domain) DeleteRule(ctx context.Context, tenant, name string) error {
	return b.a.DeleteRule(ctx, tenant, name)
}

func (b Domain) PutOverride(ctx context.Context, o sluice.Override) (sluice.Override, error) {
	stored, err := b.a.PutOverride(ctx, adminapi.NewOverride(o))
	if err != nil {
		return sluice.Override{}, err
	}
	return fromAPIOverride(stored)
}

func (b Domain) Overrides(ctx context.Context, tenant, rule string) ([]sluice.Override, error) {
	os, err := b.a.Overrides(ctx, tenant, rule)
	if err != nil {
		return nil, err
	}
	out := make([]sluice.Override, 0, len(os))
	for _, o := range os {
		do, err := fromAPIOverride(o)
		if err != nil {
			return nil, err
		}
		out = append(out, do)
	}
	return out, nil
}

func (b Domain) Override(ctx context.Context, tenant, rule, name string) (sluice.Override, error) {
	o, err := b.a.Override(ctx, tenant, rule, name)
	if err != nil {
		return sluice.Override{}, err
	}
	return fromAPIOverride(o)
}

func (b Domain) DeleteOverride(ctx context.Context, tenant, rule, name string) error {
	return b.a.DeleteOverride(ctx, tenant, rule, name)
}

// fromAPIOverride reads an override the server sent.
func fromAPIOverride(o Override) (sluice.Override, error) {
	out, err := o.ToOverride()
	if err != nil {
		return out, fmt.Errorf("the server sent override %s of rule %s with a limit this sluice cannot read: %w", o.Name, o.Rule, err)
	}
	return out, nil
}

// fromAPIRule reads a rule the server sent.
func fromAPIRule(r Rule) (sluice.Rule, error) {
	out, err := r.ToRule()
	if err != nil {
		return out, fmt.Errorf("the server sent rule %s with a limit this sluice cannot read: %w", r.Name, err)
	}
	return out, nil
}
