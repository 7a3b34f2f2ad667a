package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresEnv names the environment variable holding the DSN of the
// PostgreSQL server Postgres creates databases on. Its user must be allowed
// to CREATE DATABASE.
const PostgresEnv = "SLUICE_TEST_POSTGRES"

// DefaultPostgresDSN is used when PostgresEnv is unset: the machine's local
// server with trust authentication.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// pgConnectTimeout bounds connecting to the admin database, with retries, so
// a server that is briefly overloaded or still starting does not fail tests.
// A variable so the package's own test of the failure path is quick.
var pgConnectTimeout = 10 * time.Second

// Postgres creates a fresh, empty database named sluice_test_<random hex> on
// the server given by $SLUICE_TEST_POSTGRES (default DefaultPostgresDSN) and
// returns a DSN for it. The database is dropped, along with any connections
// still open to it, when the test ends. The test fails if the server cannot be
// reached.
func Postgres(t testing.TB) string {
	t.Helper()
	skipShort(t, "a PostgreSQL server")
	admin := os.Getenv(PostgresEnv)
	if admin == "" {
		admin = DefaultPostgresDSN
	}

	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // never fails on Linux
	name := "sluice_test_" + hex.EncodeToString(rnd[:])
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("testenv: %s: %v", PostgresEnv, err)
	}

	conn, err := pgAdminConnect(admin)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatalf("testenv: CREATE DATABASE %s on %s: %v", name, describeDSN(admin), err)
	}

	t.Cleanup(func() {
		conn, err := pgAdminConnect(admin)
		if err != nil {
			t.Errorf("testenv: dropping database %s: %v", name, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		defer conn.Close(ctx)
		// FORCE (PostgreSQL 13+) terminates connections the test leaked,
		// such as a pool it never closed, instead of failing the drop.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: DROP DATABASE %s: %v", name, err)
		}
	})
	return dsn
}

// pgAdminConnect connects to the admin DSN, retrying until pgConnectTimeout.
func pgAdminConnect(admin string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid DSN: %v", PostgresEnv, err)
	}
	start := time.Now()
	deadline := start.Add(pgConnectTimeout)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		cancel()
		if err == nil {
			return conn, nil
		}
		// A refused connection means no server is listening: give one that
		// is restarting a moment, but do not make every test in a suite wait
		// the full timeout on a machine where PostgreSQL is simply absent.
		refused := errors.Is(err, syscall.ECONNREFUSED) && time.Since(start) > 2*time.Second
		if refused || time.Now().Add(200*time.Millisecond).After(deadline) {
			return nil, fmt.Errorf("cannot connect to PostgreSQL at %s: %v\n"+
				"PostgreSQL must be running at that address for these tests "+
				"(Debian: apt-get install postgresql, then start it), "+
				"or set %s to the DSN of a server whose user may CREATE DATABASE, "+
				"e.g. %s=postgres://user:password@host:5432/postgres?sslmode=disable",
				describeDSN(admin), err, PostgresEnv, PostgresEnv)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// withDatabase returns dsn pointing at database name instead, keeping every
// other setting. It accepts both URL and keyword/value DSNs.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", err
	}
	// In keyword/value form a later key overrides an earlier one.
	return strings.TrimSpace(dsn) + " dbname=" + name, nil
}

// describeDSN names the server in messages without leaking a password.
func describeDSN(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return fmt.Sprintf("%s:%d (user %q, database %q)", cfg.Host, cfg.Port, cfg.User, cfg.Database)
}
