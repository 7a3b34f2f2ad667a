// Package postgres is the sluice.Catalog on PostgreSQL, for production: any
// number of service instances share one database.
//
// Every change bumps a version counter and sends pg_notify on channel
// sluice_catalog in the same transaction, so the notification goes out only
// when the change is visible. Watch listens on a dedicated connection and, as
// a safety net for a missed notification or a dropped connection, also reads
// the version every 500ms.
package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/migrations"
)

// Channel is the LISTEN/NOTIFY channel catalog changes are announced on.
const Channel = "sluice_catalog"

// PollInterval is how often Watch reads the version even without a
// notification.
const PollInterval = 500 * time.Millisecond

// resetRetention is how long subject resets are kept for watchers that
// missed their notification.
const resetRetention = 10 * time.Minute

// Catalog is a sluice.Catalog on PostgreSQL. It is safe for concurrent use.
type Catalog struct {
	pool   *pgxpool.Pool
	closed chan struct{}
	now    func() time.Time
}

var _ sluice.Catalog = (*Catalog)(nil)

// Open connects to the database at dsn (a postgres:// URL or keyword/value
// string). It does not change the schema: call Migrate.
func Open(ctx context.Context, dsn string) (*Catalog, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres catalog: invalid database address: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres catalog: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres catalog: cannot reach %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return &Catalog{pool: pool, closed: make(chan struct{}), now: time.Now}, nil
}

// Close releases the connections; running Watch calls return.
func (c *Catalog) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
		c.pool.Close()
	}
	return nil
}

// Ping reports whether the database answers, for readiness checks.
func (c *Catalog) Ping(ctx context.Context) error { return c.pool.Ping(ctx) }

// migrationLock is the pg_advisory_lock key that serialises Migrate across
// instances starting at once ("sluice" in ASCII).
const migrationLock = 0x736c75696365

// Migrate applies the pending schema steps, each in its own transaction,
// recorded in schema_migrations. Concurrent calls, from any number of
// processes, wait for each other.
func (c *Catalog) Migrate(ctx context.Context) error {
	steps, err := migrations.For(migrations.Postgres)
	if err != nil {
		return err
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even if ctx ended.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(migrationLock)); err != nil {
			// A session lock outliving its use would block every later
			// Migrate: drop the connection, which releases it.
			_ = conn.Conn().Close(ctx)
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version       INTEGER PRIMARY KEY,
		name          TEXT    NOT NULL,
		applied_at_ms BIGINT  NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	applied := make(map[int]bool)
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
	}
	for _, m := range steps {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, $2, $3)",
				m.Version, m.Name, c.now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: step %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// change runs fn in a transaction that first bumps the catalog version (which
// also serialises all changes, so fn's checks cannot race) and notifies
// watchers on commit. If fn fails nothing is changed.
func (c *Catalog) change(ctx context.Context, fn func(tx pgx.Tx, version int64) error) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var version int64
		if err := tx.QueryRow(ctx, "UPDATE catalog_state SET version = version + 1 WHERE id = 1 RETURNING version").Scan(&version); err != nil {
			return err
		}
		if err := fn(tx, version); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, strconv.FormatInt(version, 10))
		return err
	})
}

func (c *Catalog) millis() int64 { return c.now().UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// isUniqueViolation reports a PostgreSQL unique_violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// tenantExists returns ErrNotFound for a missing tenant.
func tenantExists(ctx context.Context, q pgx.Tx, name string) error {
	var one int
	err := q.QueryRow(ctx, "SELECT 1 FROM tenants WHERE name = $1", name).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
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
	err := c.change(ctx, func(tx pgx.Tx, _ int64) error {
		tag, err := tx.Exec(ctx, "INSERT INTO tenants (name, status, created_at_ms) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
			t.Name, string(t.Status), t.CreatedAt.UnixMilli())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("tenant %q %w", name, sluice.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return sluice.Tenant{}, err
	}
	return t, nil
}

func scanTenant(row pgx.Row) (sluice.Tenant, error) {
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
	t, err := scanTenant(c.pool.QueryRow(ctx, "SELECT name, status, created_at_ms FROM tenants WHERE name = $1", name))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
	}
	return t, err
}

// Tenants lists all tenants by name.
func (c *Catalog) Tenants(ctx context.Context) ([]sluice.Tenant, error) {
	return queryTenants(ctx, c.pool)
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func queryTenants(ctx context.Context, q querier) ([]sluice.Tenant, error) {
	// COLLATE "C": byte order, as on SQLite, whatever the database's
	// collation (glibc's en_US skips '-', putting "ab" before "a-c").
	rows, err := q.Query(ctx, `SELECT name, status, created_at_ms FROM tenants ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sluice.Tenant, error) { return scanTenant(r) })
}

// SetTenantStatus suspends or resumes a tenant.
func (c *Catalog) SetTenantStatus(ctx context.Context, name string, status sluice.TenantStatus) (sluice.Tenant, error) {
	if err := sluice.ValidateTenantStatus(status); err != nil {
		return sluice.Tenant{}, err
	}
	var t sluice.Tenant
	err := c.change(ctx, func(tx pgx.Tx, _ int64) error {
		var err error
		t, err = scanTenant(tx.QueryRow(ctx, "UPDATE tenants SET status = $2 WHERE name = $1 RETURNING name, status, created_at_ms", name, string(status)))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
		}
		return err
	})
	return t, err
}

// DeleteTenant deletes the tenant with its keys and rules.
func (c *Catalog) DeleteTenant(ctx context.Context, name string) error {
	return c.change(ctx, func(tx pgx.Tx, _ int64) error {
		tag, err := tx.Exec(ctx, "DELETE FROM tenants WHERE name = $1", name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
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
	err := c.change(ctx, func(tx pgx.Tx, version int64) error {
		if err := tenantExists(ctx, tx, tenant); err != nil {
			return err
		}
		var taken int
		err := tx.QueryRow(ctx, "SELECT count(*) FROM api_keys WHERE tenant = $1 AND name = $2 AND revoked_at_ms IS NULL", tenant, name).Scan(&taken)
		if err != nil {
			return err
		}
		if taken > 0 {
			return fmt.Errorf("tenant %q already has an active key named %q: %w", tenant, name, sluice.ErrConflict)
		}
		_, err = tx.Exec(ctx, `INSERT INTO api_keys (id, tenant, name, role, key_hash, created_at_ms, created_version)
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

func scanKey(row pgx.Row) (sluice.APIKey, error) {
	var k sluice.APIKey
	var role string
	var created int64
	var revoked *int64
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &role, &created, &revoked); err != nil {
		return k, err
	}
	k.Role, k.CreatedAt = sluice.Role(role), fromMillis(created)
	if revoked != nil {
		t := fromMillis(*revoked)
		k.RevokedAt = &t
	}
	return k, nil
}

// Keys lists the tenant's keys, revoked ones included, in creation order.
func (c *Catalog) Keys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	var keys []sluice.APIKey
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tenantExists(ctx, tx, tenant); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE tenant = $1 ORDER BY created_version", tenant)
		if err != nil {
			return err
		}
		keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (sluice.APIKey, error) { return scanKey(r) })
		return err
	})
	return keys, err
}

// RevokeKey revokes a key for good; revoking it again keeps the first time.
func (c *Catalog) RevokeKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	var k sluice.APIKey
	err := c.change(ctx, func(tx pgx.Tx, _ int64) error {
		var err error
		k, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at_ms = COALESCE(revoked_at_ms, $3)
			WHERE tenant = $1 AND id = $2 RETURNING `+keyColumns, tenant, id, c.millis()))
		if errors.Is(err, pgx.ErrNoRows) {
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
	err := c.change(ctx, func(tx pgx.Tx, _ int64) error {
		if err := tenantExists(ctx, tx, r.Tenant); err != nil {
			return err
		}
		var other string
		err := tx.QueryRow(ctx, "SELECT name FROM rules WHERE tenant = $1 AND route = $2 AND name <> $3", r.Tenant, r.Route, r.Name).Scan(&other)
		if err == nil {
			return fmt.Errorf("rule %q of tenant %q already uses route %q: %w", other, r.Tenant, r.Route, sluice.ErrConflict)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO rules (tenant, name, route, failure_mode, shadow, updated_at_ms)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (tenant, name) DO UPDATE SET route = excluded.route, failure_mode = excluded.failure_mode,
				shadow = excluded.shadow, updated_at_ms = excluded.updated_at_ms`,
			r.Tenant, r.Name, r.Route, string(r.FailureMode), r.Shadow, r.UpdatedAt.UnixMilli())
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM rule_limits WHERE tenant = $1 AND rule = $2", r.Tenant, r.Name); err != nil {
			return err
		}
		for i, l := range r.Limits {
			_, err := tx.Exec(ctx, `INSERT INTO rule_limits (tenant, rule, ordinal, name, algorithm, capacity, refill_per_second, window_ms)
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

// ruleKey identifies a rule while assembling rules and limits.
type ruleKey struct{ tenant, name string }

// queryRules reads rules and their limits, ordered by tenant and name: all of
// them, a tenant's (name empty) or one (both set).
func queryRules(ctx context.Context, q querier, tenant, name string) ([]sluice.Rule, error) {
	rows, err := q.Query(ctx, `SELECT tenant, name, route, failure_mode, shadow, updated_at_ms FROM rules
		WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR name = $2) ORDER BY tenant COLLATE "C", name COLLATE "C"`, tenant, name)
	if err != nil {
		return nil, err
	}
	rules, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sluice.Rule, error) {
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
	rows, err = q.Query(ctx, `SELECT tenant, rule, name, algorithm, capacity, refill_per_second, window_ms FROM rule_limits
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
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
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
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
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
	return c.change(ctx, func(tx pgx.Tx, _ int64) error {
		tag, err := tx.Exec(ctx, "DELETE FROM rules WHERE tenant = $1 AND name = $2", tenant, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("rule %q of tenant %q: %w", name, tenant, sluice.ErrNotFound)
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
	return c.change(ctx, func(tx pgx.Tx, _ int64) error {
		_, err := tx.Exec(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2)
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
	err := c.change(ctx, func(tx pgx.Tx, _ int64) error {
		tag, err := tx.Exec(ctx, "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
			adminTokenSetting, hex.EncodeToString(hash))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errNotStored
		}
		return nil
	})
	if errors.Is(err, errNotStored) {
		return false, nil
	}
	return err == nil, err
}

// AdminTokenHash returns the stored operator token hash, or ErrNotFound.
func (c *Catalog) AdminTokenHash(ctx context.Context) ([]byte, error) {
	return adminTokenHash(ctx, c.pool)
}

type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func adminTokenHash(ctx context.Context, q rowQuerier) ([]byte, error) {
	var value string
	err := q.QueryRow(ctx, "SELECT value FROM settings WHERE name = $1", adminTokenSetting).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("admin token: %w", sluice.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return hex.DecodeString(value)
}

// Snapshot reads the whole catalog in one repeatable-read transaction.
func (c *Catalog) Snapshot(ctx context.Context) (*sluice.Snapshot, error) {
	var snap *sluice.Snapshot
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var version int64
		if err := tx.QueryRow(ctx, "SELECT version FROM catalog_state WHERE id = 1").Scan(&version); err != nil {
			return err
		}
		tenants, err := queryTenants(ctx, tx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT key_hash, tenant, id, role FROM api_keys WHERE revoked_at_ms IS NULL")
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sluice.SnapshotKey, error) {
			var k sluice.SnapshotKey
			var hash, role string
			if err := r.Scan(&hash, &k.Tenant, &k.KeyID, &role); err != nil {
				return k, err
			}
			k.Role = sluice.Role(role)
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
	err := c.pool.QueryRow(ctx, "SELECT version FROM catalog_state WHERE id = 1").Scan(&v)
	return v, err
}

// PublishReset announces a subject reset to every watching instance.
func (c *Catalog) PublishReset(ctx context.Context, tenant, rule, subject string) error {
	if err := (sluice.SubjectReset{Tenant: tenant, Rule: rule, Subject: subject}).Validate(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var seq int64
		if err := tx.QueryRow(ctx, "UPDATE catalog_state SET reset_seq = reset_seq + 1 WHERE id = 1 RETURNING reset_seq").Scan(&seq); err != nil {
			return err
		}
		now := c.millis()
		if _, err := tx.Exec(ctx, "INSERT INTO subject_resets (id, tenant, rule, subject, created_at_ms) VALUES ($1, $2, $3, $4, $5)",
			seq, tenant, rule, subject, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM subject_resets WHERE created_at_ms < $1", now-resetRetention.Milliseconds()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, "reset")
		return err
	})
}
