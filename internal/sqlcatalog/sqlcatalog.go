// Package sqlcatalog is the one sluice.Catalog implementation over
// database/sql, shared by package postgres and package sqlite. Those keep
// only what differs between the databases: opening, migration locking and
// their change feeds, handed over as a Dialect.
//
// Every change runs in one write transaction that first bumps the catalog
// version (which also serialises changes, so a change's checks cannot race
// another's), then does its work, then calls the dialect's Notify hook, so a
// notification goes out only with a change that commits. Reads that must be
// consistent (Snapshot, lists) run in one read transaction with the
// dialect's options.
//
// Queries are written with $N placeholders and in the SQL both PostgreSQL and
// SQLite accept; what they do not share is in Dialect.
package sqlcatalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/migrations"
)

// Dialect is what the catalog needs to know about one database.
type Dialect struct {
	// Name is the database's name in messages and in package migrations
	// (migrations.Postgres, migrations.SQLite).
	Name string
	// IsUniqueViolation reports an error from a unique or primary key
	// constraint.
	IsUniqueViolation func(error) bool
	// IsReadOnly reports an error of a write the database refused because
	// it cannot write at all (it is then wrapped in sluice.ErrCatalogReadOnly).
	IsReadOnly func(error) bool
	// ByteOrder is appended to a text column in ORDER BY so that lists come
	// out in byte order whatever the database's collation (` COLLATE "C"`
	// on PostgreSQL; empty where byte order is the default).
	ByteOrder string
	// Notify, if set, runs last in every change's transaction, with the new
	// version as payload (or "reset" for a subject reset), to wake watchers
	// at once when it commits.
	Notify func(ctx context.Context, tx *sql.Tx, payload string) error
	// ReadTx are the options of read transactions (nil: the driver's
	// default, enough where a read transaction is already a snapshot).
	ReadTx *sql.TxOptions
	// LockMigrations, if set, takes a lock that serialises Migrate across
	// processes on conn, and returns how to release it. Without it, each
	// step checks again, inside its transaction, whether it is applied,
	// which serialises where a write transaction locks the whole database.
	LockMigrations func(ctx context.Context, conn *sql.Conn) (unlock func(), err error)
	// PollInterval is how often Watch reads the version.
	PollInterval time.Duration
	// Listen, if set, runs for as long as a Watch does and calls wake on
	// every notification, so Watch looks without waiting for its next
	// poll. It returns when ctx ends, reporting failures it recovers from
	// through report.
	Listen func(ctx context.Context, wake func(), report func(error))
}

// Catalog is a sluice.Catalog over database/sql. It is safe for concurrent
// use.
type Catalog struct {
	dialect Dialect
	write   *sql.DB
	read    *sql.DB
	closed  chan struct{}
	close   sync.Once
	now     func() time.Time
	caps    sluice.TenantCaps
	// usageSeries caches usage_series ids (usage.go).
	usageSeries seriesIDs

	reportMu sync.Mutex
	watchLog *slog.Logger
	onError  func()
}

var _ sluice.Catalog = (*Catalog)(nil)

// New returns a catalog writing through write and reading through read
// (which may be the same pool). Close closes both.
func New(d Dialect, write, read *sql.DB) *Catalog {
	return &Catalog{dialect: d, write: write, read: read, closed: make(chan struct{}), now: time.Now,
		caps: sluice.TenantCaps{}.WithDefaults()}
}

// SetTenantCaps sets the caps CreateKey and PutRule enforce (zero values:
// the defaults). Call it before the catalog is used. Every instance on one
// database should be given the same caps; each enforces its own on the
// creates it makes.
func (c *Catalog) SetTenantCaps(caps sluice.TenantCaps) { c.caps = caps.WithDefaults() }

// underCap returns a TenantCapError when the tenant already holds cap of
// what (counted by query, with the tenant as $1). It runs inside a change,
// after the version bump that serialises changes on every dialect (a row
// lock on PostgreSQL, the write lock on SQLite), so the count cannot go
// stale before the create commits, whatever runs on other instances.
func underCap(ctx context.Context, tx *sql.Tx, tenant, what string, limit int, query string) error {
	if limit < 0 {
		return nil
	}
	var have int
	if err := tx.QueryRowContext(ctx, query, tenant).Scan(&have); err != nil {
		return err
	}
	if have >= limit {
		return &sluice.TenantCapError{Tenant: tenant, What: what, Have: have, Cap: limit}
	}
	return nil
}

// Close closes the database handles; running Watch calls return.
func (c *Catalog) Close() error {
	var err error
	c.close.Do(func() {
		close(c.closed)
		err = c.read.Close()
		if c.write != c.read {
			err = errors.Join(err, c.write.Close())
		}
	})
	return err
}

// Ping reports whether the database answers, for readiness checks.
func (c *Catalog) Ping(ctx context.Context) error {
	if err := c.read.PingContext(ctx); err != nil {
		return fmt.Errorf("ping the %s catalog: %w", c.dialect.Name, err)
	}
	return nil
}

// ReportWatchErrors makes Watch log each distinct error it recovers from
// once (until a look succeeds again) on log, and call count for every one.
// Call it before Watch.
func (c *Catalog) ReportWatchErrors(log *slog.Logger, count func()) {
	c.reportMu.Lock()
	defer c.reportMu.Unlock()
	c.watchLog, c.onError = log, count
}

// fail wraps err with what was being done, unless it is a domain error,
// which already says what is wrong in a sentence meant for the caller.
func fail(what string, err error) error {
	if err == nil || errors.Is(err, sluice.ErrNotFound) || errors.Is(err, sluice.ErrConflict) || errors.Is(err, sluice.ErrInvalid) ||
		errors.Is(err, sluice.ErrTenantCap) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// inTx runs fn in a transaction on db, committing if it succeeds.
func inTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// writeTx runs fn in a write transaction; a refusal of a database that
// cannot write is marked sluice.ErrCatalogReadOnly.
func (c *Catalog) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return c.markReadOnly(inTx(ctx, c.write, nil, fn))
}

// markReadOnly wraps err in sluice.ErrCatalogReadOnly when the dialect says
// the database refused a write because it cannot write.
func (c *Catalog) markReadOnly(err error) error {
	if err != nil && c.dialect.IsReadOnly != nil && c.dialect.IsReadOnly(err) {
		return fmt.Errorf("%w: %w", sluice.ErrCatalogReadOnly, err)
	}
	return err
}

// CheckWritable reports whether the database takes a write, without making
// one: a write that changes nothing, in a transaction rolled back. It is
// sluice.ErrCatalogReadOnly when the database refuses it because it cannot
// write. Call it on an interval (readiness), never per request: it takes
// the write lock for a moment.
func (c *Catalog) CheckWritable(ctx context.Context) error {
	err := func() error {
		tx, err := c.write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, "UPDATE catalog_state SET version = version WHERE id = 1")
		return err
	}()
	if err != nil {
		return fmt.Errorf("probe a write to the %s catalog: %w", c.dialect.Name, c.markReadOnly(err))
	}
	return nil
}

// view runs fn in one read transaction: a consistent view of the catalog.
func (c *Catalog) view(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, c.read, c.dialect.ReadTx, fn)
}

// change runs fn in a write transaction that first bumps the catalog
// version, then records in the audit log what fn says it did, and notifies
// watchers on commit. If fn fails nothing is changed.
func (c *Catalog) change(ctx context.Context, fn func(tx *sql.Tx, version int64) (record, error)) error {
	return c.writeTx(ctx, func(tx *sql.Tx) error {
		var version int64
		if err := tx.QueryRowContext(ctx, "UPDATE catalog_state SET version = version + 1 WHERE id = 1 RETURNING version").Scan(&version); err != nil {
			return err
		}
		rec, err := fn(tx, version)
		if err != nil {
			return err
		}
		if err := c.writeAudit(ctx, tx, rec); err != nil {
			return err
		}
		return c.notify(ctx, tx, fmt.Sprint(version))
	})
}

func (c *Catalog) notify(ctx context.Context, tx *sql.Tx, payload string) error {
	if c.dialect.Notify == nil {
		return nil
	}
	return c.dialect.Notify(ctx, tx, payload)
}

// Migrate applies the pending schema steps, each in its own transaction,
// recorded in schema_migrations. Concurrent calls, from any number of
// processes, wait for each other (Dialect.LockMigrations).
func (c *Catalog) Migrate(ctx context.Context) error {
	if err := c.migrate(ctx); err != nil {
		return fmt.Errorf("migrate the %s catalog: %w", c.dialect.Name, err)
	}
	return nil
}

func (c *Catalog) migrate(ctx context.Context) error {
	steps, err := migrations.For(c.dialect.Name)
	if err != nil {
		return err
	}
	conn, err := c.write.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if c.dialect.LockMigrations != nil {
		unlock, err := c.dialect.LockMigrations(ctx, conn)
		if err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		defer unlock()
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version       INTEGER PRIMARY KEY,
		name          TEXT    NOT NULL,
		applied_at_ms BIGINT  NOT NULL)`); err != nil {
		return err
	}
	for _, m := range steps {
		err := func() error {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
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
			if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, $2, $3)",
				m.Version, m.Name, c.millis()); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err != nil {
			return fmt.Errorf("step %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

func (c *Catalog) millis() int64 { return c.now().UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

type scanner interface{ Scan(dest ...any) error }

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
