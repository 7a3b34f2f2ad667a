package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/postgres"
	"github.com/sluicelabs/sluice/sqlite"
)

// defaultDatabase is the embedded default catalog: a SQLite file in the
// working directory.
const defaultDatabase = "sqlite://sluice.db"

// migratingCatalog is a catalog that can apply its schema migrations and
// report the errors its change feed recovers from; both implementations are.
type migratingCatalog interface {
	sluice.Catalog
	Migrate(ctx context.Context) error
	ReportWatchErrors(log *slog.Logger, count func())
	SetTenantCaps(sluice.TenantCaps)
	// RunAuditRetention prunes the audit log in the background.
	RunAuditRetention(ctx context.Context, retention time.Duration, log *slog.Logger)
}

// envTenantCaps are the per-tenant caps of a catalog opened outside sluice
// serve (the command line's --database path, apply): those of
// SLUICE_MAX_RULES_PER_TENANT and SLUICE_MAX_KEYS_PER_TENANT, as serve reads
// them, else the defaults. The catalog enforces them, whoever writes.
func envTenantCaps() (sluice.TenantCaps, error) {
	var caps sluice.TenantCaps
	for _, c := range []struct {
		flag string
		to   *int
	}{{"max-rules-per-tenant", &caps.Rules}, {"max-keys-per-tenant", &caps.Keys}} {
		v, ok := os.LookupEnv(envName(c.flag))
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return caps, fmt.Errorf("environment variable %s=%q is not a number", envName(c.flag), v)
		}
		*c.to = n
	}
	return caps, nil
}

// openCatalog opens the catalog named by a database URL: postgres://...
// (or postgresql://...) or sqlite://path (sqlite:///abs/path for an
// absolute path).
func openCatalog(ctx context.Context, url string) (migratingCatalog, error) {
	caps, err := envTenantCaps()
	if err != nil {
		return nil, err
	}
	c, err := openCatalogURL(ctx, url)
	if err != nil {
		return nil, err
	}
	c.SetTenantCaps(caps)
	return c, nil
}

func openCatalogURL(ctx context.Context, url string) (migratingCatalog, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		c, err := postgres.Open(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("open the PostgreSQL catalog: %w", err)
		}
		return c, nil
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" {
			return nil, fmt.Errorf("database %q names no file; use sqlite://sluice.db or sqlite:///var/lib/sluice/sluice.db", url)
		}
		c, err := sqlite.Open(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("open the SQLite catalog %s: %w", path, err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("database %q is not supported; use postgres://user@host:5432/db or sqlite://path", redactURL(url))
}

// openMigratedCatalog opens the catalog and applies pending migrations.
func openMigratedCatalog(ctx context.Context, url string) (migratingCatalog, error) {
	c, err := openCatalog(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := c.Migrate(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("apply catalog migrations: %w", err)
	}
	return c, nil
}

// redactURL hides a password in a URL before it reaches a message.
func redactURL(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return url
}
