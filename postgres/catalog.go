// Package postgres is the sluice.Catalog on PostgreSQL, for production: any
// number of service instances share one database.
//
// The catalog itself is the shared SQL implementation (internal/sqlcatalog);
// this package opens the database and adds what only PostgreSQL has: an
// advisory lock around migrations, and LISTEN/NOTIFY. Every change sends
// pg_notify on channel sluice_catalog in its own transaction, so the
// notification goes out only when the change is visible. Watch listens on a
// dedicated connection and, as a safety net for a missed notification or a
// dropped connection, also reads the version every PollInterval.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/migrations"
	"github.com/sluicelabs/sluice/internal/sqlcatalog"
)

// Channel is the LISTEN/NOTIFY channel catalog changes are announced on.
const Channel = "sluice_catalog"

// PollInterval is how often Watch reads the version even without a
// notification.
const PollInterval = 500 * time.Millisecond

// Catalog is a sluice.Catalog on PostgreSQL. It is safe for concurrent use.
type Catalog struct {
	*sqlcatalog.Catalog
	pool *pgxpool.Pool
}

var _ sluice.Catalog = (*Catalog)(nil)

// Open connects to the database at dsn (a postgres:// URL or keyword/value
// string, pgxpool's pool_* settings included). It does not change the
// schema: call Migrate.
func Open(ctx context.Context, dsn string) (*Catalog, error) {
	poolCfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres catalog: invalid database address: %w", err)
	}
	cfg := poolCfg.ConnConfig
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("postgres catalog: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres catalog: cannot reach %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	// database/sql over the pool, which keeps the connections.
	db := stdlib.OpenDBFromPool(pool)
	d := sqlcatalog.Dialect{
		Name:              migrations.Postgres,
		IsUniqueViolation: isUniqueViolation,
		IsReadOnly:        isReadOnly,
		// Byte order, as on SQLite, whatever the database's collation
		// (glibc's en_US skips '-', putting "ab" before "a-c").
		ByteOrder:      ` COLLATE "C"`,
		Notify:         notify,
		ReadTx:         &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
		LockMigrations: lockMigrations,
		PollInterval:   PollInterval,
		Listen:         func(ctx context.Context, wake func(), report func(error)) { listen(ctx, cfg, wake, report) },
	}
	return &Catalog{sqlcatalog.New(d, db, db), pool}, nil
}

// Close releases the connections; running Watch calls return.
func (c *Catalog) Close() error {
	err := c.Catalog.Close()
	c.pool.Close()
	return err
}

// isUniqueViolation reports a PostgreSQL unique_violation.
// isReadOnly reports SQLSTATE 25006, read_only_sql_transaction: a write to
// a database in read-only mode (default_transaction_read_only, a standby
// promoted to nothing yet).
func isReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func notify(ctx context.Context, tx *sql.Tx, payload string) error {
	_, err := tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", Channel, payload)
	return err
}

// migrationLock is the pg_advisory_lock key that serialises Migrate across
// instances starting at once ("sluice" in ASCII).
const migrationLock = 0x736c75696365

func lockMigrations(ctx context.Context, conn *sql.Conn) (func(), error) {
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return nil, err
	}
	return func() {
		// A fresh context: the lock must be released even if ctx ended.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", int64(migrationLock)); err != nil {
			// A session lock outliving its use would block every later
			// Migrate: drop the connection, which releases it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}, nil
}

// listen holds a dedicated connection LISTENing on Channel and wakes Watch
// on every notification, reconnecting with backoff until ctx ends. After a
// reconnect it wakes it too, for what may have been missed meanwhile.
func listen(ctx context.Context, cfg *pgx.ConnConfig, wake func(), report func(error)) {
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := listenOnce(ctx, cfg, wake)
		if ctx.Err() != nil {
			return
		}
		// The poll covers the gap, but an operator should know.
		report(fmt.Errorf("listen for catalog notifications: %w", err))
		if time.Since(start) > maxBackoff {
			backoff = minBackoff // it was up for a while: a fresh failure
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func listenOnce(ctx context.Context, cfg *pgx.ConnConfig, wake func()) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return err
	}
	wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}

// Unreachable reports whether err says the database could not be reached or
// cannot serve yet (a refused or dropped connection, a timeout, a server
// starting up or shutting down, out of connections) rather than that it
// refused this process (a wrong password, a missing database, a failed
// statement): the first passes, so a starting service waits for it; the
// second is a configuration error that waiting does not mend.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08 connection exception, 53 insufficient resources (too many
		// connections), 57 operator intervention (shutting down, "the
		// database system is starting up").
		switch pgErr.Code[:min(2, len(pgErr.Code))] {
		case "08", "53", "57":
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
