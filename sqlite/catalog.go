// Package sqlite is the sluice.Catalog in a SQLite file (modernc.org/sqlite,
// pure Go): the embedded default of `sluice serve`. Several processes may
// share one file.
//
// The file runs in WAL mode, so reads never wait for the writer. Writes go
// through one connection and take the write lock when they begin (BEGIN
// IMMEDIATE), so they never fail half-way on a lock held by another process;
// busy_timeout makes them wait for it instead. Watch reads the version every
// PollInterval, which is how processes sharing the file see each other's
// changes.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/migrations"
)

// PollInterval is how often Watch reads the version.
const PollInterval = 250 * time.Millisecond

// resetRetention is how long subject resets are kept for watchers.
const resetRetention = 10 * time.Minute

// Catalog is a sluice.Catalog in a SQLite file. It is safe for concurrent
// use.
type Catalog struct {
	write  *sql.DB // one connection; every transaction is BEGIN IMMEDIATE
	read   *sql.DB
	closed chan struct{}
	now    func() time.Time
}

var _ sluice.Catalog = (*Catalog)(nil)

// Open opens (creating it if needed) the SQLite file at path. It does not
// change the schema: call Migrate.
func Open(ctx context.Context, path string) (*Catalog, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, ":memory:") {
		return nil, fmt.Errorf("sqlite catalog: %q is not a usable file path (it must name a file, without '?' or '#'): %w", path, sluice.ErrInvalid)
	}
	// The catalog holds key and token hashes and every tenant's rules:
	// create it readable by its owner only (SQLite gives its -wal and -shm
	// files the same mode).
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		_ = f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sqlite catalog: cannot create %s: %w", path, err)
	}
	const params = "_busy_timeout=5000&_journal_mode=WAL&_foreign_keys=1&_synchronous=NORMAL"
	// SQLite decodes %XX in a file: URI, so "a%20b.db" would open "a b.db".
	uri := "file:" + strings.ReplaceAll(path, "%", "%25")
	write, err := sql.Open("sqlite", uri+"?"+params+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite catalog: %w", err)
	}
	write.SetMaxOpenConns(1)
	read, err := sql.Open("sqlite", uri+"?"+params+"&_query_only=1")
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("sqlite catalog: %w", err)
	}
	read.SetMaxOpenConns(4)
	c := &Catalog{write: write, read: read, closed: make(chan struct{}), now: time.Now}
	// The writer opens first so that it creates the file and switches it to WAL.
	if err := write.PingContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("sqlite catalog: cannot open %s: %w", path, err)
	}
	if err := read.PingContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("sqlite catalog: cannot open %s: %w", path, err)
	}
	return c, nil
}

// Close closes the file; running Watch calls return.
func (c *Catalog) Close() error {
	select {
	case <-c.closed:
		return nil
	default:
	}
	close(c.closed)
	return errors.Join(c.read.Close(), c.write.Close())
}

// Ping reports whether the file can be read, for readiness checks.
func (c *Catalog) Ping(ctx context.Context) error {
	var one int
	return c.read.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// Migrate applies the pending schema steps, each in its own transaction,
// recorded in schema_migrations. Each step takes the write lock and checks
// again whether it is applied, so processes migrating at once wait for each
// other.
func (c *Catalog) Migrate(ctx context.Context) error {
	steps, err := migrations.For(migrations.SQLite)
	if err != nil {
		return err
	}
	if _, err := c.write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version       INTEGER PRIMARY KEY,
		name          TEXT    NOT NULL,
		applied_at_ms BIGINT  NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range steps {
		err := c.inTx(ctx, c.write, func(tx *sql.Tx) error {
			var applied int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations WHERE version = $1", m.Version).Scan(&applied); err != nil {
				return err
			}
			if applied > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, $2, $3)",
				m.Version, m.Name, c.millis())
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: step %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// inTx runs fn in a transaction on db, committing if it succeeds.
func (c *Catalog) inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// view runs fn in one read transaction: a consistent view of the file.
func (c *Catalog) view(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return c.inTx(ctx, c.read, fn)
}

// change runs fn in a write transaction that also bumps the catalog version;
// if fn fails nothing is changed.
func (c *Catalog) change(ctx context.Context, fn func(tx *sql.Tx, version int64) error) error {
	return c.inTx(ctx, c.write, func(tx *sql.Tx) error {
		var version int64
		if err := tx.QueryRowContext(ctx, "UPDATE catalog_state SET version = version + 1 WHERE id = 1 RETURNING version").Scan(&version); err != nil {
			return err
		}
		return fn(tx, version)
	})
}

func (c *Catalog) millis() int64 { return c.now().UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// isUniqueViolation reports a UNIQUE or PRIMARY KEY constraint failure.
func isUniqueViolation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

func tenantExists(ctx context.Context, tx *sql.Tx, name string) error {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM tenants WHERE name = $1", name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
	}
	return err
}

// CreateTenant creates an active tenant.
func (c *Catalog) CreateTenant(ctx context.Context, name string) (sluice.Tenant, error) {
	if err := sluice.ValidateTenantName(name); err != nil {
		return sluice.Tenant{}, err
	}
	t := sluice.Tenant{Name: name, Status: sluice.TenantActive, CreatedAt: fromMillis(c.millis())}
	err := c.change(ctx, func(tx *sql.Tx, _ int64) error {
		res, err := tx.ExecContext(ctx, "INSERT INTO tenants (name, status, created_at_ms) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
			t.Name, string(t.Status), t.CreatedAt.UnixMilli())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("tenant %q %w", name, sluice.ErrConflict))
		}
		return nil
	})
	if err != nil {
		return sluice.Tenant{}, err
	}
	return t, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanTenant(row scanner) (sluice.Tenant, error) {
	var t sluice.Tenant
	var status string
	var created int64
	if err := row.Scan(&t.Name, &status, &created); err != nil {
		return t, err
	}
	t.Status, t.CreatedAt = sluice.TenantStatus(status), fromMillis(created)
	return t, nil
}

// Tenant returns the named tenant.
func (c *Catalog) Tenant(ctx context.Context, name string) (sluice.Tenant, error) {
	t, err := scanTenant(c.read.QueryRowContext(ctx, "SELECT name, status, created_at_ms FROM tenants WHERE name = $1", name))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
	}
	return t, err
}

// Tenants lists all tenants by name.
func (c *Catalog) Tenants(ctx context.Context) ([]sluice.Tenant, error) {
	var tenants []sluice.Tenant
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		tenants, err = queryTenants(ctx, tx)
		return err
	})
	return tenants, err
}

// collect scans every row with scan.
func collect[T any](rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func queryTenants(ctx context.Context, tx *sql.Tx) ([]sluice.Tenant, error) {
	rows, err := tx.QueryContext(ctx, "SELECT name, status, created_at_ms FROM tenants ORDER BY name")
	return collect(rows, err, scanTenant)
}

// SetTenantStatus suspends or resumes a tenant.
func (c *Catalog) SetTenantStatus(ctx context.Context, name string, status sluice.TenantStatus) (sluice.Tenant, error) {
	if err := sluice.ValidateTenantStatus(status); err != nil {
		return sluice.Tenant{}, err
	}
	var t sluice.Tenant
	err := c.change(ctx, func(tx *sql.Tx, _ int64) error {
		var err error
		t, err = scanTenant(tx.QueryRowContext(ctx, "UPDATE tenants SET status = $2 WHERE name = $1 RETURNING name, status, created_at_ms", name, string(status)))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
		}
		return err
	})
	return t, err
}

// DeleteTenant deletes the tenant with its keys and rules.
func (c *Catalog) DeleteTenant(ctx context.Context, name string) error {
	return c.change(ctx, func(tx *sql.Tx, _ int64) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM tenants WHERE name = $1", name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound))
		}
		return nil
	})
}

// CreateKey stores a new key of the tenant whose secret hashes to hash.
func (c *Catalog) CreateKey(ctx context.Context, tenant, name string, role sluice.Role, hash []byte) (sluice.APIKey, error) {
	if err := sluice.ValidateNewKey(tenant, name, role, hash); err != nil {
		return sluice.APIKey{}, err
	}
	k := sluice.APIKey{ID: sluice.NewAPIKeyID(), Tenant: tenant, Name: name, Role: role, CreatedAt: fromMillis(c.millis())}
	err := c.change(ctx, func(tx *sql.Tx, version int64) error {
		if err := tenantExists(ctx, tx, tenant); err != nil {
			return err
		}
		var taken int
		err := tx.QueryRowContext(ctx, "SELECT count(*) FROM api_keys WHERE tenant = $1 AND name = $2 AND revoked_at_ms IS NULL", tenant, name).Scan(&taken)
		if err != nil {
			return err
		}
		if taken > 0 {
			return fmt.Errorf("tenant %q already has an active key named %q: %w", tenant, name, sluice.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, tenant, name, role, key_hash, created_at_ms, created_version)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, k.ID, tenant, name, string(role), hex.EncodeToString(hash), k.CreatedAt.UnixMilli(), version)
		if isUniqueViolation(err) {
			return fmt.Errorf("key %q: a key with this ID or secret %w", name, sluice.ErrConflict)
		}
		return err
	})
	if err != nil {
		return sluice.APIKey{}, err
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
	return keys, err
}

// RevokeKey revokes a key for good; revoking it again keeps the first time.
func (c *Catalog) RevokeKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	var k sluice.APIKey
	err := c.change(ctx, func(tx *sql.Tx, _ int64) error {
		var err error
		k, err = scanKey(tx.QueryRowContext(ctx, `UPDATE api_keys SET revoked_at_ms = COALESCE(revoked_at_ms, $3)
			WHERE tenant = $1 AND id = $2 RETURNING `+keyColumns, tenant, id, c.millis()))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("key %q of tenant %q: %w", id, tenant, sluice.ErrNotFound)
		}
		return err
	})
	return k, err
}

// PutRule creates or replaces a rule.
func (c *Catalog) PutRule(ctx context.Context, r sluice.Rule) (sluice.Rule, error) {
	if err := r.Validate(); err != nil {
		return sluice.Rule{}, err
	}
	if r.FailureMode == "" {
		r.FailureMode = sluice.FailClosed
	}
	r.Limits = append([]sluice.Limit(nil), r.Limits...)
	r.UpdatedAt = fromMillis(c.millis())
	err := c.change(ctx, func(tx *sql.Tx, _ int64) error {
		if err := tenantExists(ctx, tx, r.Tenant); err != nil {
			return err
		}
		var other string
		err := tx.QueryRowContext(ctx, "SELECT name FROM rules WHERE tenant = $1 AND route = $2 AND name <> $3", r.Tenant, r.Route, r.Name).Scan(&other)
		if err == nil {
			return fmt.Errorf("rule %q of tenant %q already uses route %q: %w", other, r.Tenant, r.Route, sluice.ErrConflict)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO rules (tenant, name, route, failure_mode, shadow, updated_at_ms)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (tenant, name) DO UPDATE SET route = excluded.route, failure_mode = excluded.failure_mode,
				shadow = excluded.shadow, updated_at_ms = excluded.updated_at_ms`,
			r.Tenant, r.Name, r.Route, string(r.FailureMode), r.Shadow, r.UpdatedAt.UnixMilli())
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM rule_limits WHERE tenant = $1 AND rule = $2", r.Tenant, r.Name); err != nil {
			return err
		}
		for i, l := range r.Limits {
			_, err := tx.ExecContext(ctx, `INSERT INTO rule_limits (tenant, rule, ordinal, name, algorithm, capacity, refill_per_second, window_ms)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
				r.Tenant, r.Name, i, l.Name, string(l.Algorithm), l.Capacity, l.RefillPerSecond, sluice.WindowColumn(l).Milliseconds())
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return sluice.Rule{}, err
	}
	return r, nil
}

type ruleKey struct{ tenant, name string }

// queryRules reads rules and their limits, ordered by tenant and name: all of
// them, a tenant's (name empty) or one (both set).
func queryRules(ctx context.Context, tx *sql.Tx, tenant, name string) ([]sluice.Rule, error) {
	rows, err := tx.QueryContext(ctx, `SELECT tenant, name, route, failure_mode, shadow, updated_at_ms FROM rules
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR name = $2) ORDER BY tenant, name`, tenant, name)
	rules, err := collect(rows, err, func(r scanner) (sluice.Rule, error) {
		var rule sluice.Rule
		var mode string
		var updated int64
		err := r.Scan(&rule.Tenant, &rule.Name, &rule.Route, &mode, &rule.Shadow, &updated)
		rule.FailureMode, rule.UpdatedAt = sluice.FailureMode(mode), fromMillis(updated)
		return rule, err
	})
	if err != nil {
		return nil, err
	}
	index := make(map[ruleKey]int, len(rules))
	for i, r := range rules {
		index[ruleKey{r.Tenant, r.Name}] = i
	}
	rows, err = tx.QueryContext(ctx, `SELECT tenant, rule, name, algorithm, capacity, refill_per_second, window_ms FROM rule_limits
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR rule = $2) ORDER BY tenant, rule, ordinal`, tenant, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tenant, rule, name, algorithm string
		var l sluice.Limit
		var windowMs int64
		if err := rows.Scan(&tenant, &rule, &name, &algorithm, &l.Capacity, &l.RefillPerSecond, &windowMs); err != nil {
			return nil, err
		}
		l.Name, l.Algorithm = name, sluice.Algorithm(algorithm)
		l = l.WithWindowColumn(time.Duration(windowMs) * time.Millisecond)
		if i, ok := index[ruleKey{tenant, rule}]; ok {
			rules[i].Limits = append(rules[i].Limits, l)
		}
	}
	return rules, rows.Err()
}

// Rule returns the named rule of the tenant.
func (c *Catalog) Rule(ctx context.Context, tenant, name string) (sluice.Rule, error) {
	var rules []sluice.Rule
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		rules, err = queryRules(ctx, tx, tenant, name)
		return err
	})
	if err != nil {
		return sluice.Rule{}, err
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
		rules, err = queryRules(ctx, tx, tenant, "")
		return err
	})
	return rules, err
}

// DeleteRule deletes the named rule of the tenant.
func (c *Catalog) DeleteRule(ctx context.Context, tenant, name string) error {
	return c.change(ctx, func(tx *sql.Tx, _ int64) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM rules WHERE tenant = $1 AND name = $2", tenant, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("rule %q of tenant %q: %w", name, tenant, sluice.ErrNotFound))
		}
		return nil
	})
}

const adminTokenSetting = "admin_token_hash"

// SetAdminTokenHash stores the SHA-256 of the operator token.
func (c *Catalog) SetAdminTokenHash(ctx context.Context, hash []byte) error {
	if err := sluice.ValidateKeyHash(hash); err != nil {
		return err
	}
	return c.change(ctx, func(tx *sql.Tx, _ int64) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, adminTokenSetting, hex.EncodeToString(hash))
		return err
	})
}

// errNotStored rolls back the version bump of a SetAdminTokenHashIfAbsent
// that found a hash already stored.
var errNotStored = errors.New("admin token hash already set")

// SetAdminTokenHashIfAbsent stores hash unless a hash is already stored.
func (c *Catalog) SetAdminTokenHashIfAbsent(ctx context.Context, hash []byte) (bool, error) {
	if err := sluice.ValidateKeyHash(hash); err != nil {
		return false, err
	}
	err := c.change(ctx, func(tx *sql.Tx, _ int64) error {
		res, err := tx.ExecContext(ctx, "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
			adminTokenSetting, hex.EncodeToString(hash))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err == nil && n == 0 {
			err = errNotStored
		}
		return err
	})
	if errors.Is(err, errNotStored) {
		return false, nil
	}
	return err == nil, err
}

// AdminTokenHash returns the stored operator token hash, or ErrNotFound.
func (c *Catalog) AdminTokenHash(ctx context.Context) ([]byte, error) {
	var hash []byte
	err := c.view(ctx, func(tx *sql.Tx) error {
		var err error
		hash, err = adminTokenHash(ctx, tx)
		return err
	})
	return hash, err
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
		tenants, err := queryTenants(ctx, tx)
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
		rules, err := queryRules(ctx, tx, "", "")
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
		return nil, fmt.Errorf("catalog snapshot: %w", err)
	}
	return snap, nil
}

// Version returns the catalog version.
func (c *Catalog) Version(ctx context.Context) (int64, error) {
	var v int64
	err := c.read.QueryRowContext(ctx, "SELECT version FROM catalog_state WHERE id = 1").Scan(&v)
	return v, err
}

// PublishReset announces a subject reset to every watching instance.
func (c *Catalog) PublishReset(ctx context.Context, tenant, rule, subject string) error {
	if err := (sluice.SubjectReset{Tenant: tenant, Rule: rule, Subject: subject}).Validate(); err != nil {
		return err
	}
	return c.inTx(ctx, c.write, func(tx *sql.Tx) error {
		var seq int64
		if err := tx.QueryRowContext(ctx, "UPDATE catalog_state SET reset_seq = reset_seq + 1 WHERE id = 1 RETURNING reset_seq").Scan(&seq); err != nil {
			return err
		}
		now := c.millis()
		if _, err := tx.ExecContext(ctx, "INSERT INTO subject_resets (id, tenant, rule, subject, created_at_ms) VALUES ($1, $2, $3, $4, $5)",
			seq, tenant, rule, subject, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "DELETE FROM subject_resets WHERE created_at_ms < $1", now-resetRetention.Milliseconds())
		return err
	})
}

// Watch reports catalog changes and subject resets (see sluice.Catalog),
// reading the version every PollInterval.
func (c *Catalog) Watch(ctx context.Context, fn func(sluice.Event)) error {
	var version, lastReset int64
	err := c.read.QueryRowContext(ctx, "SELECT version, reset_seq FROM catalog_state WHERE id = 1").Scan(&version, &lastReset)
	if err != nil {
		return fmt.Errorf("watch catalog: %w", err)
	}
	fn(sluice.Event{Version: version})
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.closed:
			return nil
		case <-tick.C:
		}
		// An error is a passing hiccup (a busy file); the next tick retries.
		events, _ := c.changesSince(ctx, &version, &lastReset)
		for _, e := range events {
			fn(e)
		}
	}
}

// changesSince reads what changed after version and the reset numbered
// lastReset, advancing both: the resets published since, then the new
// version if it moved.
func (c *Catalog) changesSince(ctx context.Context, version, lastReset *int64) ([]sluice.Event, error) {
	var events []sluice.Event
	err := c.view(ctx, func(tx *sql.Tx) error {
		var v, resetSeq int64
		if err := tx.QueryRowContext(ctx, "SELECT version, reset_seq FROM catalog_state WHERE id = 1").Scan(&v, &resetSeq); err != nil {
			return err
		}
		if resetSeq > *lastReset {
			rows, err := tx.QueryContext(ctx, "SELECT tenant, rule, subject FROM subject_resets WHERE id > $1 AND id <= $2 ORDER BY id", *lastReset, resetSeq)
			resets, err := collect(rows, err, func(r scanner) (sluice.SubjectReset, error) {
				var x sluice.SubjectReset
				return x, r.Scan(&x.Tenant, &x.Rule, &x.Subject)
			})
			if err != nil {
				return err
			}
			for _, r := range resets {
				events = append(events, sluice.Event{Version: *version, Reset: &r})
			}
		}
		if v != *version {
			events = append(events, sluice.Event{Version: v})
		}
		*version, *lastReset = v, max(resetSeq, *lastReset)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}
