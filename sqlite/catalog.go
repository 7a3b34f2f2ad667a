// Package sqlite is the sluice.Catalog in a SQLite file (modernc.org/sqlite,
// pure Go): the embedded default of `sluice serve`. Several processes may
// share one file.
//
// The catalog itself is the shared SQL implementation (internal/sqlcatalog);
// this package opens the file. It runs in WAL mode, so reads never wait for
// the writer. Writes go through one connection and take the write lock when
// they begin (BEGIN IMMEDIATE), so they never fail half-way on a lock held by
// another process, and migrations of processes starting at once wait for
// each other; busy_timeout makes them wait for the lock instead of failing.
// There is no notification between processes: Watch reads the version every
// PollInterval, which is how processes sharing the file see each other's
// changes.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/migrations"
	"github.com/sluicelabs/sluice/internal/sqlcatalog"
)

// PollInterval is how often Watch reads the version.
const PollInterval = 250 * time.Millisecond

// Catalog is a sluice.Catalog in a SQLite file. It is safe for concurrent
// use.
type Catalog struct {
	*sqlcatalog.Catalog
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
	c := &Catalog{sqlcatalog.New(sqlcatalog.Dialect{
		Name:              migrations.SQLite,
		IsUniqueViolation: isUniqueViolation,
		IsReadOnly:        isReadOnly,
		// SQLite's default BINARY collation is byte order, and a read
		// transaction on a WAL file is a snapshot already.
		PollInterval: PollInterval,
	}, write, read)}
	// The writer opens first so that it creates the file and switches it to WAL.
	for _, db := range []*sql.DB{write, read} {
		if err := db.PingContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("sqlite catalog: cannot open %s: %w", path, err)
		}
	}
	return c, nil
}

// isReadOnly reports SQLITE_READONLY, of any extended kind: a write to a
// file SQLite could open for reading only (its mode, a read-only file
// system, an immutable file), or one it can no longer write.
func isReadOnly(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_READONLY
}

// isUniqueViolation reports a UNIQUE or PRIMARY KEY constraint failure.
func isUniqueViolation(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}
