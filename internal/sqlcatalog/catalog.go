package sqlcatalog

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/sluicelabs/sluice"
)

// tenantExists returns ErrNotFound for a missing tenant.
func tenantExists(ctx context.Context, tx *sql.Tx, name string) error {
	_, err := tenantGeneration(ctx, tx, name)
	return err
}

// rowsAffected returns notFound when res changed no row.
func rowsAffected(res sql.Result, notFound error) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound
	}
	return nil
}

const tenantColumns = "name, status, created_at_ms, generation"

func scanTenant(row scanner) (sluice.Tenant, error) {
	var t sluice.Tenant
	var status string
	var created int64
	var generation sql.NullInt64
	if err := row.Scan(&t.Name, &status, &created, &generation); err != nil {
		return t, err
	}
	t.Status, t.CreatedAt, t.Generation = sluice.TenantStatus(status), fromMillis(created), generation.Int64
	return t, nil
}

// CreateTenant creates an active tenant. Its generation is the catalog
// version that creates it, which no later tenant can have.
func (c *Catalog) CreateTenant(ctx context.Context, name string) (sluice.Tenant, error) {
	if err := sluice.TenantName(name).Validate(); err != nil {
		return sluice.Tenant{}, err
	}
	t := sluice.Tenant{Name: name, Status: sluice.TenantActive, CreatedAt: fromMillis(c.millis())}
	err := c.change(ctx, func(tx *sql.Tx, version int64) (record, error) {
		t.Generation = version
		res, err := tx.ExecContext(ctx, "INSERT INTO tenants ("+tenantColumns+") VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
			t.Name, string(t.Status), t.CreatedAt.UnixMilli(), t.Generation)
		if err != nil {
			return record{}, err
		}
		rec := record{action: sluice.AuditTenantCreate, tenant: name, target: name, generation: version, after: t}
		return rec, rowsAffected(res, fmt.Errorf("tenant %q %w", name, sluice.ErrConflict))
	})
	if err != nil {
		return sluice.Tenant{}, fail(fmt.Sprintf("create tenant %q", name), err)
	}
	return t, nil
}

// readTenant reads the named tenant in tx, or returns ErrNotFound.
func readTenant(ctx context.Context, tx *sql.Tx, name string) (sluice.Tenant, error) {
	t, err := scanTenant(tx.QueryRowContext(ctx, "SELECT "+tenantColumns+" FROM tenants WHERE name = $1", name))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
	}
	return t, err
}

// Tenant returns the named tenant.
func (c *Catalog) Tenant(ctx context.Context, name string) (sluice.Tenant, error) {
	t, err := scanTenant(c.read.QueryRowContext(ctx, "SELECT "+tenantColumns+" FROM tenants WHERE name = $1", name))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
	}
	return t, fail(fmt.Sprintf("read tenant %q", name), err)
}

// Tenants lists all tenants by name.
func (c *Catalog) Tenants(ctx context.Context) ([]sluice.Tenant, error) {
	var tenants []sluice.Tenant
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		tenants, err = c.queryTenants(ctx, tx)
		return err
	})
	return tenants, fail("list tenants", err)
}

func (c *Catalog) queryTenants(ctx context.Context, tx *sql.Tx) ([]sluice.Tenant, error) {
	rows, err := tx.QueryContext(ctx, "SELECT "+tenantColumns+" FROM tenants ORDER BY name"+c.dialect.ByteOrder)
	return collect(rows, err, scanTenant)
}

// SetTenantStatus suspends or resumes a tenant.
func (c *Catalog) SetTenantStatus(ctx context.Context, name string, status sluice.TenantStatus) (sluice.Tenant, error) {
	if err := status.Validate(); err != nil {
		return sluice.Tenant{}, err
	}
	var t sluice.Tenant
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		before, err := readTenant(ctx, tx, name)
		if err != nil {
			return record{}, err
		}
		t, err = scanTenant(tx.QueryRowContext(ctx, "UPDATE tenants SET status = $2 WHERE name = $1 RETURNING "+tenantColumns, name, string(status)))
		return record{action: sluice.AuditTenantUpdate, tenant: name, target: name, generation: t.Generation, before: before, after: t}, err
	})
	return t, fail(fmt.Sprintf("set the status of tenant %q", name), err)
}

// DeleteTenant deletes the tenant with its keys and rules.
func (c *Catalog) DeleteTenant(ctx context.Context, name string) error {
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		before, err := readTenant(ctx, tx, name)
		if err != nil {
			return record{}, err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM tenants WHERE name = $1", name)
		return record{action: sluice.AuditTenantDelete, tenant: name, target: name, generation: before.Generation, before: before}, err
	})
	return fail(fmt.Sprintf("delete tenant %q", name), err)
}

// CreateKey stores a new key of the tenant whose secret hashes to hash.
func (c *Catalog) CreateKey(ctx context.Context, tenant, name string, role sluice.Role, hash []byte) (sluice.APIKey, error) {
	k := sluice.APIKey{ID: sluice.NewAPIKeyID(), Tenant: tenant, Name: name, Role: role, CreatedAt: fromMillis(c.millis())}
	if err := k.Validate(); err != nil {
		return sluice.APIKey{}, err
	}
	if err := sluice.KeyHash(hash).Validate(); err != nil {
		return sluice.APIKey{}, err
	}
	err := c.change(ctx, func(tx *sql.Tx, version int64) (record, error) {
		generation, err := tenantGeneration(ctx, tx, tenant)
		if err != nil {
			return record{}, err
		}
		var taken int
		err = tx.QueryRowContext(ctx, "SELECT count(*) FROM api_keys WHERE tenant = $1 AND name = $2 AND revoked_at_ms IS NULL", tenant, name).Scan(&taken)
		if err != nil {
			return record{}, err
		}
		if taken > 0 {
			return record{}, fmt.Errorf("tenant %q already has an active key named %q: %w", tenant, name, sluice.ErrConflict)
		}
		err = underCap(ctx, tx, tenant, "active API keys", c.caps.Keys,
			"SELECT count(*) FROM api_keys WHERE tenant = $1 AND revoked_at_ms IS NULL")
		if err != nil {
			return record{}, err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant, name, role, key_hash, created_at_ms, created_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, k.ID, tenant, name, string(role), hex.EncodeToString(hash), k.CreatedAt.UnixMilli(), version)
		if err != nil && c.dialect.IsUniqueViolation(err) {
			return record{}, fmt.Errorf("key %q: a key with this ID or secret %w", name, sluice.ErrConflict)
		}
		return record{action: sluice.AuditKeyCreate, tenant: tenant, target: k.ID, generation: generation, after: k}, err
	})
	if err != nil {
		return sluice.APIKey{}, fail(fmt.Sprintf("create key %q of tenant %q", name, tenant), err)
	}
	return k, nil
}

const keyColumns = "id, tenant, name, role, created_at_ms, revoked_at_ms"

func scanKey(row scanner) (sluice.APIKey, error) {
	var k sluice.APIKey
	var role string
	var created int64
	var revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &role, &created, &revoked); err != nil {
		return k, err
	}
	k.Role, k.CreatedAt = sluice.Role(role), fromMillis(created)
	if revoked.Valid {
		t := fromMillis(revoked.Int64)
		k.RevokedAt = &t
	}
	return k, nil
}

// Keys lists the tenant's keys, revoked ones included, in creation order.
func (c *Catalog) Keys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	var keys []sluice.APIKey
	err := c.view(ctx, func(tx *sql.Tx) error {
		if err := tenantExists(ctx, tx, tenant); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE tenant = $1 ORDER BY created_version", tenant)
		keys, err = collect(rows, err, scanKey)
		return err
	})
	return keys, fail(fmt.Sprintf("list the keys of tenant %q", tenant), err)
}

// RevokeKey revokes a key for good; revoking it again keeps the first time.
func (c *Catalog) RevokeKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	var k sluice.APIKey
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		before, err := scanKey(tx.QueryRowContext(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE tenant = $1 AND id = $2", tenant, id))
		if errors.Is(err, sql.ErrNoRows) {
			return record{}, fmt.Errorf("key %q of tenant %q: %w", id, tenant, sluice.ErrNotFound)
		}
		if err != nil {
			return record{}, err
		}
		generation, err := tenantGeneration(ctx, tx, tenant)
		if err != nil {
			return record{}, err
		}
		k, err = scanKey(tx.QueryRowContext(ctx, `UPDATE api_keys SET revoked_at_ms = COALESCE(revoked_at_ms, $3)
			WHERE tenant = $1 AND id = $2 RETURNING `+keyColumns, tenant, id, c.millis()))
		return record{action: sluice.AuditKeyRevoke, tenant: tenant, target: id, generation: generation, before: before, after: k}, err
	})
	return k, fail(fmt.Sprintf("revoke key %q of tenant %q", id, tenant), err)
}

// PutRule creates or replaces a rule.
func (c *Catalog) PutRule(ctx context.Context, r sluice.Rule) (sluice.Rule, error) {
	if err := r.Validate(); err != nil {
		return sluice.Rule{}, err
	}
	r.Limits = append([]sluice.Limit(nil), r.Limits...)
	r.UpdatedAt = fromMillis(c.millis())
	plans, err := encodePlans(r.Plans)
	if err != nil {
		return sluice.Rule{}, fail(fmt.Sprintf("put rule %q of tenant %q", r.Name, r.Tenant), err)
	}
	err = c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		rec := record{action: sluice.AuditRuleCreate, tenant: r.Tenant, target: r.Name, after: r}
		var err error
		if rec.generation, err = tenantGeneration(ctx, tx, r.Tenant); err != nil {
			return record{}, err
		}
		var other string
		err = tx.QueryRowContext(ctx, "SELECT name FROM rules WHERE tenant = $1 AND route = $2 AND name <> $3", r.Tenant, r.Route, r.Name).Scan(&other)
		if err == nil {
			return record{}, fmt.Errorf("rule %q of tenant %q already uses route %q: %w", other, r.Tenant, r.Route, sluice.ErrConflict)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return record{}, err
		}
		before, err := c.queryRules(ctx, tx, r.Tenant, r.Name)
		if err != nil {
			return record{}, err
		}
		if len(before) > 0 {
			rec.action, rec.before = sluice.AuditRuleReplace, before[0]
			r.Overrides = before[0].Overrides
			if o, limit, lost := r.OverridesLosingLimits(r.Overrides); lost {
				return record{}, fmt.Errorf("rule %q of tenant %q: override %q sets limit %q, which the rule would no longer have; change or delete the override first: %w",
					r.Name, r.Tenant, o, limit, sluice.ErrConflict)
			}
		} else if err := underCap(ctx, tx, r.Tenant, "rules", c.caps.Rules, "SELECT count(*) FROM rules WHERE tenant = $1"); err != nil {
			return record{}, err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO rules (tenant, name, route, failure_mode, shadow, updated_at_ms, plans_json)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (tenant, name) DO UPDATE SET route = excluded.route, failure_mode = excluded.failure_mode,
				shadow = excluded.shadow, updated_at_ms = excluded.updated_at_ms, plans_json = excluded.plans_json`,
			r.Tenant, r.Name, r.Route, string(r.FailureMode), r.Shadow, r.UpdatedAt.UnixMilli(), plans)
		if err != nil {
			return record{}, err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM rule_limits WHERE tenant = $1 AND rule = $2", r.Tenant, r.Name); err != nil {
			return record{}, err
		}
		for i, l := range r.Limits {
			_, err := tx.ExecContext(ctx, `INSERT INTO rule_limits (tenant, rule, ordinal, name, algorithm, capacity, refill_per_second, window_ms, lease,
					refill, calendar, time_zone)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
				r.Tenant, r.Name, i, l.Name, string(l.Algorithm), l.Capacity, l.RefillPerSecond, sluice.WindowColumn(l).Milliseconds(), l.Lease,
				sluice.RefillColumn(l.Refill), string(l.Calendar), l.TimeZone)
			if err != nil {
				return record{}, err
			}
		}
		return rec, nil
	})
	if err != nil {
		return sluice.Rule{}, fail(fmt.Sprintf("put rule %q of tenant %q", r.Name, r.Tenant), err)
	}
	return r, nil
}

// ruleKey identifies a rule while assembling rules and limits.
type ruleKey struct{ tenant, name string }

// queryRules reads rules and their limits, ordered by tenant and name: all of
// them, a tenant's (name empty) or one (both set).
func (c *Catalog) queryRules(ctx context.Context, tx *sql.Tx, tenant, name string) ([]sluice.Rule, error) {
	rows, err := tx.QueryContext(ctx, `SELECT tenant, name, route, failure_mode, shadow, updated_at_ms, plans_json FROM rules
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR name = $2) ORDER BY tenant`+c.dialect.ByteOrder+`, name`+c.dialect.ByteOrder, tenant, name)
	rules, err := collect(rows, err, func(r scanner) (sluice.Rule, error) {
		var rule sluice.Rule
		var mode, plans string
		var updated int64
		if err := r.Scan(&rule.Tenant, &rule.Name, &rule.Route, &mode, &rule.Shadow, &updated, &plans); err != nil {
			return rule, err
		}
		rule.FailureMode, rule.UpdatedAt = sluice.FailureMode(mode), fromMillis(updated)
		var err error
		rule.Plans, err = decodePlans(plans)
		if err != nil {
			return rule, fmt.Errorf("rule %q of tenant %q: %w", rule.Name, rule.Tenant, err)
		}
		return rule, nil
	})
	if err != nil {
		return nil, err
	}
	index := make(map[ruleKey]int, len(rules))
	for i, r := range rules {
		index[ruleKey{r.Tenant, r.Name}] = i
	}
	rows, err = tx.QueryContext(ctx, `SELECT tenant, rule, name, algorithm, capacity, refill_per_second, window_ms, lease, refill, calendar, time_zone FROM rule_limits
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR rule = $2) ORDER BY tenant, rule, ordinal`, tenant, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tenant, rule, name, algorithm string
		var l sluice.Limit
		var windowMs int64
		var refill, calendar string
		if err := rows.Scan(&tenant, &rule, &name, &algorithm, &l.Capacity, &l.RefillPerSecond, &windowMs, &l.Lease, &refill, &calendar, &l.TimeZone); err != nil {
			return nil, err
		}
		var err error
		if l.Refill, err = sluice.ParseRefillColumn(refill); err != nil {
			return nil, err
		}
		l.Calendar = sluice.Calendar(calendar)
		l.Name, l.Algorithm = name, sluice.Algorithm(algorithm)
		l = l.WithWindowColumn(time.Duration(windowMs) * time.Millisecond)
		if i, ok := index[ruleKey{tenant, rule}]; ok {
			rules[i].Limits = append(rules[i].Limits, l)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	overrides, err := c.queryOverrides(ctx, tx, tenant, name, "")
	if err != nil {
		return nil, err
	}
	for _, o := range overrides {
		if i, ok := index[ruleKey{o.Tenant, o.Rule}]; ok {
			rules[i].Overrides = append(rules[i].Overrides, o)
		}
	}
	return rules, nil
}

// Rule returns the named rule of the tenant.
func (c *Catalog) Rule(ctx context.Context, tenant, name string) (sluice.Rule, error) {
	var rules []sluice.Rule
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		rules, err = c.queryRules(ctx, tx, tenant, name)
		return err
	})
	if err != nil {
		return sluice.Rule{}, fail(fmt.Sprintf("read rule %q of tenant %q", name, tenant), err)
	}
	if tenant == "" || name == "" || len(rules) == 0 {
		return sluice.Rule{}, fmt.Errorf("rule %q of tenant %q: %w", name, tenant, sluice.ErrNotFound)
	}
	return rules[0], nil
}

// Rules lists the tenant's rules by name.
func (c *Catalog) Rules(ctx context.Context, tenant string) ([]sluice.Rule, error) {
	var rules []sluice.Rule
	err := c.view(ctx, func(tx *sql.Tx) error {
		if err := tenantExists(ctx, tx, tenant); err != nil {
			return err
		}
		var err error
		rules, err = c.queryRules(ctx, tx, tenant, "")
		return err
	})
	return rules, fail(fmt.Sprintf("list the rules of tenant %q", tenant), err)
}

// DeleteRule deletes the named rule of the tenant.
func (c *Catalog) DeleteRule(ctx context.Context, tenant, name string) error {
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		before, err := c.queryRules(ctx, tx, tenant, name)
		if err != nil {
			return record{}, err
		}
		if tenant == "" || name == "" || len(before) == 0 {
			return record{}, fmt.Errorf("rule %q of tenant %q: %w", name, tenant, sluice.ErrNotFound)
		}
		generation, err := tenantGeneration(ctx, tx, tenant)
		if err != nil {
			return record{}, err
		}
		_, err = tx.ExecContext(ctx, "DELETE FROM rules WHERE tenant = $1 AND name = $2", tenant, name)
		return record{action: sluice.AuditRuleDelete, tenant: tenant, target: name, generation: generation, before: before[0]}, err
	})
	return fail(fmt.Sprintf("delete rule %q of tenant %q", name, tenant), err)
}

const adminTokenSetting = "admin_token_hash"

// adminTokenRecord audits a new admin token: that it changed, never what to.
var adminTokenRecord = record{action: sluice.AuditAdminTokenSet, target: "admin_token"}

// SetAdminTokenHash stores the SHA-256 of the operator token.
func (c *Catalog) SetAdminTokenHash(ctx context.Context, hash []byte) error {
	if err := sluice.KeyHash(hash).Validate(); err != nil {
		return err
	}
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, adminTokenSetting, hex.EncodeToString(hash))
		return adminTokenRecord, err
	})
	return fail("store the admin token hash", err)
}

// errNotStored rolls back the version bump of a SetAdminTokenHashIfAbsent
// that found a hash already stored.
var errNotStored = errors.New("admin token hash already set")

// SetAdminTokenHashIfAbsent stores hash unless a hash is already stored.
func (c *Catalog) SetAdminTokenHashIfAbsent(ctx context.Context, hash []byte) (bool, error) {
	if err := sluice.KeyHash(hash).Validate(); err != nil {
		return false, err
	}
	err := c.change(ctx, func(tx *sql.Tx, _ int64) (record, error) {
		res, err := tx.ExecContext(ctx, "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
			adminTokenSetting, hex.EncodeToString(hash))
		if err != nil {
			return record{}, err
		}
		return adminTokenRecord, rowsAffected(res, errNotStored)
	})
	if errors.Is(err, errNotStored) {
		return false, nil
	}
	return err == nil, fail("store the admin token hash", err)
}

// AdminTokenHash returns the stored operator token hash, or ErrNotFound.
func (c *Catalog) AdminTokenHash(ctx context.Context) ([]byte, error) {
	var hash []byte
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		hash, err = adminTokenHash(ctx, tx)
		return err
	})
	return hash, fail("read the admin token hash", err)
}

func adminTokenHash(ctx context.Context, tx *sql.Tx) ([]byte, error) {
	var value string
	err := tx.QueryRowContext(ctx, "SELECT value FROM settings WHERE name = $1", adminTokenSetting).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("admin token: %w", sluice.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return hex.DecodeString(value)
}

// Snapshot reads the whole catalog in one read transaction.
func (c *Catalog) Snapshot(ctx context.Context) (*sluice.Snapshot, error) {
	var snap *sluice.Snapshot
	err := c.view(ctx, func(tx *sql.Tx) error {
		var version int64
		if err := tx.QueryRowContext(ctx, "SELECT version FROM catalog_state WHERE id = 1").Scan(&version); err != nil {
			return err
		}
		tenants, err := c.queryTenants(ctx, tx)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT key_hash, tenant, id, role FROM api_keys WHERE revoked_at_ms IS NULL")
		keys, err := collect(rows, err, func(r scanner) (sluice.SnapshotKey, error) {
			var k sluice.SnapshotKey
			var hash, role string
			if err := r.Scan(&hash, &k.Tenant, &k.KeyID, &role); err != nil {
				return k, err
			}
			k.Role = sluice.Role(role)
			var err error
			k.Hash, err = hex.DecodeString(hash)
			return k, err
		})
		if err != nil {
			return err
		}
		rules, err := c.queryRules(ctx, tx, "", "")
		if err != nil {
			return err
		}
		admin, err := adminTokenHash(ctx, tx)
		if err != nil && !errors.Is(err, sluice.ErrNotFound) {
			return err
		}
		snap = sluice.NewSnapshot(version, tenants, keys, rules, admin)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read a catalog snapshot: %w", err)
	}
	return snap, nil
}

// Version returns the catalog version.
func (c *Catalog) Version(ctx context.Context) (int64, error) {
	var v int64
	err := c.read.QueryRowContext(ctx, "SELECT version FROM catalog_state WHERE id = 1").Scan(&v)
	return v, fail("read the catalog version", err)
}

// resetRetention is how long subject resets are kept for watchers that
// missed their notification.
const resetRetention = 10 * time.Minute

// PublishReset announces a subject reset to every watching instance.
func (c *Catalog) PublishReset(ctx context.Context, tenant, rule, subject string) error {
	if err := (sluice.SubjectReset{Tenant: tenant, Rule: rule, Subject: subject}).Validate(); err != nil {
		return err
	}
	err := c.writeTx(ctx, func(tx *sql.Tx) error {
		var seq int64
		if err := tx.QueryRowContext(ctx, "UPDATE catalog_state SET reset_seq = reset_seq + 1 WHERE id = 1 RETURNING reset_seq").Scan(&seq); err != nil {
			return err
		}
		now := c.millis()
		if _, err := tx.ExecContext(ctx, "INSERT INTO subject_resets (id, tenant, rule, subject, created_at_ms) VALUES ($1, $2, $3, $4, $5)",
			seq, tenant, rule, subject, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM subject_resets WHERE created_at_ms < $1", now-resetRetention.Milliseconds()); err != nil {
			return err
		}
		return c.notify(ctx, tx, "reset")
	})
	return fail(fmt.Sprintf("publish the reset of subject %q under rule %q of tenant %q", subject, rule, tenant), err)
}

func (c *Catalog) RecordReset(ctx context.Context, tenant, rule, subject string) error {
	reset := sluice.SubjectReset{Tenant: tenant, Rule: rule, Subject: subject}
	if err := reset.Validate(); err != nil {
		return err
	}
	err := c.writeTx(ctx, func(tx *sql.Tx) error {
		// A reset of a tenant that is gone resets nothing, and is still
		// recorded: it was asked for.
		generation, err := tenantGeneration(ctx, tx, tenant)
		if err != nil && !errors.Is(err, sluice.ErrNotFound) {
			return err
		}
		return c.writeAudit(ctx, tx, record{action: sluice.AuditSubjectReset, tenant: tenant, target: rule, generation: generation, after: reset})
	})
	return fail(fmt.Sprintf("record the reset of subject %q under rule %q of tenant %q", subject, rule, tenant), err)
}

func (c *Catalog) RecordTopUp(ctx context.Context, t sluice.TopUp) error {
	if err := (sluice.SubjectReset{Tenant: t.Tenant, Rule: t.Rule, Subject: t.Subject}).Validate(); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	err := c.writeTx(ctx, func(tx *sql.Tx) error {
		generation, err := tenantGeneration(ctx, tx, t.Tenant)
		if err != nil && !errors.Is(err, sluice.ErrNotFound) {
			return err
		}
		return c.writeAudit(ctx, tx, record{action: sluice.AuditCreditsTopUp, tenant: t.Tenant, target: t.Rule, generation: generation, after: t})
	})
	return fail(fmt.Sprintf("record the top-up of subject %q under rule %q of tenant %q", t.Subject, t.Rule, t.Tenant), err)
}
