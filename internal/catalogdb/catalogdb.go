// Package catalogdb opens the catalog a database URL names: PostgreSQL
// (postgres://...) or a SQLite file (sqlite://path).
package catalogdb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/postgres"
	"github.com/sluicelabs/sluice/sqlite"
)

// Default is the embedded default catalog: a SQLite file in the working
// directory.
const Default = "sqlite://sluice.db"

// Catalog is a catalog that can apply its schema migrations, report the
// errors its change feed recovers from, enforce per-tenant caps and prune
// its audit log; both implementations are.
type Catalog interface {
	sluice.Catalog
	Migrate(ctx context.Context) error
	ReportWatchErrors(log *slog.Logger, count func())
	SetTenantCaps(sluice.TenantCaps)
	// RunAuditRetention prunes the audit log in the background.
	RunAuditRetention(ctx context.Context, retention time.Duration, log *slog.Logger)
}

// Open opens the catalog named by url: postgres://... (or postgresql://...)
// or sqlite://path (sqlite:///abs/path for an absolute path).
func Open(ctx context.Context, url string) (Catalog, error) {
	switch {
	case isPostgres(url):
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
	return nil, fmt.Errorf("database %q is not supported; use postgres://user@host:5432/db or sqlite://path", Redact(url))
}

func isPostgres(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

// Retryable says which errors of the catalog at url a start waits through:
// PostgreSQL's unreachability; nothing on SQLite, a local file.
func Retryable(url string) func(error) bool {
	if !isPostgres(url) {
		return func(error) bool { return false }
	}
	return postgres.Unreachable
}

// Kind names the catalog backend for logs without its credentials: the
// whole URL of a SQLite file, the scheme of anything else.
func Kind(url string) string {
	if strings.HasPrefix(url, "sqlite://") {
		return url
	}
	if scheme, _, ok := strings.Cut(url, "://"); ok {
		return scheme
	}
	return "unknown"
}

// Redact hides a password in a URL before it reaches a message.
func Redact(url string) string {
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
