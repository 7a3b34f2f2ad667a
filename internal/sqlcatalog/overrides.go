package sqlcatalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

// Plans and override limits are stored as JSON in the admin API's form
// (adminapi.Limit), read back by the same code as a PUT body, so what is
// stored means what the PUT that stored it meant.

// encodePlans is the plans_json column of plans: "" for none.
func encodePlans(plans sluice.Plans) (string, error) {
	if len(plans) == 0 {
		return "", nil
	}
	b, err := json.Marshal(adminapi.NewPlans(plans))
	return string(b), err
}

func decodePlans(s string) (sluice.Plans, error) {
	if s == "" {
		return nil, nil
	}
	var doc map[string][]adminapi.Limit
	if err := json.Unmarshal([]byte(s), &doc); err != nil {
		return nil, fmt.Errorf("read its plans: %w", err)
	}
	return adminapi.ToPlans(doc)
}

// overrideTarget is an override's audit target: "rule/override".
func overrideTarget(rule, name string) string { return rule + "/" + name }

const overrideColumns = "tenant, rule, name, subjects_json, limits_json, expires_at_ms, updated_at_ms"

func scanOverride(row scanner) (sluice.Override, error) {
	var o sluice.Override
	var subjects, limits string
	var expires sql.NullInt64
	var updated int64
	if err := row.Scan(&o.Tenant, &o.Rule, &o.Name, &subjects, &limits, &expires, &updated); err != nil {
		return o, err
	}
	if err := json.Unmarshal([]byte(subjects), &o.Subjects); err != nil {
		return o, fmt.Errorf("override %q of rule %q: read its subjects: %w", o.Name, o.Rule, err)
	}
	var ls []adminapi.Limit
	if err := json.Unmarshal([]byte(limits), &ls); err != nil {
		return o, fmt.Errorf("override %q of rule %q: read its limits: %w", o.Name, o.Rule, err)
	}
	var err error
	if o.Limits, err = adminapi.ToLimits(ls); err != nil {
		return o, fmt.Errorf("override %q of rule %q: %w", o.Name, o.Rule, err)
	}
	if expires.Valid {
		o.ExpiresAt = fromMillis(expires.Int64)
	}
	o.UpdatedAt = fromMillis(updated)
	return o, nil
}

// queryOverrides reads overrides by tenant, rule and name: all of them,
// a tenant's, a rule's or one (each of tenant, rule and name empty for any).
func (c *Catalog) queryOverrides(ctx context.Context, tx *sql.Tx, tenant, rule, name string) ([]sluice.Override, error) {
	rows, err := tx.QueryContext(ctx, "SELECT "+overrideColumns+` FROM rule_overrides
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR rule = $2) AND ($3 = '' OR name = $3)
		ORDER BY tenant`+c.dialect.ByteOrder+`, rule`+c.dialect.ByteOrder+`, name`+c.dialect.ByteOrder, tenant, rule, name)
	return collect(rows, err, scanOverride)
}

// PutOverride creates or replaces an override of a rule.
func (c *Catalog) PutOverride(ctx context.Context, o sluice.Override) (sluice.Override, error) {
	what := fmt.Sprintf("put override %q of rule %q of tenant %q", o.Name, o.Rule, o.Tenant)
	if err := sluice.TenantName(o.Tenant).Validate(); err != nil {
		return sluice.Override{}, err
	}
	if err := sluice.RuleName(o.Rule).Validate(); err != nil {
		return sluice.Override{}, err
	}
	if err := o.Validate(); err != nil {
		return sluice.Override{}, err
	}
	o.Subjects = append([]string(nil), o.Subjects...)
	o.Limits = append([]sluice.Limit(nil), o.Limits...)
	if !o.ExpiresAt.IsZero() {
		// Stored in milliseconds: the override returned is the one read back.
		o.ExpiresAt = fromMillis(o.ExpiresAt.UnixMilli())
	}
	o.UpdatedAt = fromMillis(c.millis())
	subjects, err := json.Marshal(o.Subjects)
	if err != nil {
		return sluice.Override{}, fail(what, err)
	}
	limits, err := json.Marshal(adminapi.NewLimits(o.Limits))
	if err != nil {
		return sluice.Override{}, fail(what, err)
	}
	var expires sql.NullInt64
	if !o.ExpiresAt.IsZero() {
		expires = sql.NullInt64{Int64: o.ExpiresAt.UnixMilli(), Valid: true}
	}
	err = c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		target := overrideTarget(o.Rule, o.Name)
		rec := record{action: sluice.AuditOverrideCreate, tenant: o.Tenant, target: target, after: o}
		var err error
		if rec.generation, err = tenantGeneration(ctx, tx, o.Tenant); err != nil {
			return record{}, err
		}
		rules, err := c.queryRules(ctx, tx, o.Tenant, o.Rule)
		if err != nil {
			return record{}, err
		}
		if len(rules) == 0 {
			return record{}, fmt.Errorf("rule %q of tenant %q: %w", o.Rule, o.Tenant, sluice.ErrNotFound)
		}
		rule := rules[0]
		if err := rule.ValidateOverrideFor(o); err != nil {
			return record{}, err
		}
		// The rule's overrides as they would be: the claims of all of them
		// checked together, so no subject is claimed twice.
		var after []sluice.Override
		for _, other := range rule.Overrides {
			if other.Name == o.Name {
				rec.action, rec.before = sluice.AuditOverrideReplace, other
				continue
			}
			after = append(after, other)
		}
		after = append(after, o) // last, so a conflict names o as the one claiming again
		if err := sluice.ValidateOverrides(after); err != nil {
			return record{}, fmt.Errorf("rule %q of tenant %q: %w", o.Rule, o.Tenant, err)
		}
		if rec.before == nil {
			if err := underCap(ctx, tx, o.Tenant, "overrides", c.caps.Overrides, "SELECT count(*) FROM rule_overrides WHERE tenant = $1"); err != nil {
				return record{}, err
			}
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO rule_overrides ("+overrideColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (tenant, rule, name) DO UPDATE SET subjects_json = excluded.subjects_json, limits_json = excluded.limits_json,
				expires_at_ms = excluded.expires_at_ms, updated_at_ms = excluded.updated_at_ms`,
			o.Tenant, o.Rule, o.Name, string(subjects), string(limits), expires, o.UpdatedAt.UnixMilli())
		return rec, err
	})
	if err != nil {
		return sluice.Override{}, fail(what, err)
	}
	return o, nil
}

// Override returns the named override of a rule.
func (c *Catalog) Override(ctx context.Context, tenant, rule, name string) (sluice.Override, error) {
	var os []sluice.Override
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		os, err = c.queryOverrides(ctx, tx, tenant, rule, name)
		return err
	})
	if err != nil {
		return sluice.Override{}, fail(fmt.Sprintf("read override %q of rule %q of tenant %q", name, rule, tenant), err)
	}
	if tenant == "" || rule == "" || name == "" || len(os) == 0 {
		return sluice.Override{}, fmt.Errorf("override %q of rule %q of tenant %q: %w", name, rule, tenant, sluice.ErrNotFound)
	}
	return os[0], nil
}

// Overrides lists a rule's overrides by name.
func (c *Catalog) Overrides(ctx context.Context, tenant, rule string) ([]sluice.Override, error) {
	var os []sluice.Override
	err := c.view(ctx, func(tx *sql.Tx) error {
		var exists int
		err := tx.QueryRowContext(ctx, "SELECT count(*) FROM rules WHERE tenant = $1 AND name = $2", tenant, rule).Scan(&exists)
		if err != nil {
			return err
		}
		if tenant == "" || rule == "" || exists == 0 {
			return fmt.Errorf("rule %q of tenant %q: %w", rule, tenant, sluice.ErrNotFound)
		}
		os, err = c.queryOverrides(ctx, tx, tenant, rule, "")
		return err
	})
	return os, fail(fmt.Sprintf("list the overrides of rule %q of tenant %q", rule, tenant), err)
}

// DeleteOverride deletes the named override of a rule.
func (c *Catalog) DeleteOverride(ctx context.Context, tenant, rule, name string) error {
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		before, err := c.queryOverrides(ctx, tx, tenant, rule, name)
		if err != nil {
			return record{}, err
		}
		if tenant == "" || rule == "" || name == "" || len(before) == 0 {
			return record{}, fmt.Errorf("override %q of rule %q of tenant %q: %w", name, rule, tenant, sluice.ErrNotFound)
		}
		generation, err := tenantGeneration(ctx, tx, tenant)
		if err != nil {
			return record{}, err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM rule_overrides WHERE tenant = $1 AND rule = $2 AND name = $3", tenant, rule, name)
		return record{action: sluice.AuditOverrideDelete, tenant: tenant, target: overrideTarget(rule, name), generation: generation, before: before[0]}, err
	})
	return fail(fmt.Sprintf("delete override %q of rule %q of tenant %q", name, rule, tenant), err)
}
