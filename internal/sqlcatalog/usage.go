package sqlcatalog

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/usage"
)

// AddUsage adds rows to the stored rollups in one transaction: a minute
// another instance wrote already gets the sums.
func (c *Catalog) AddUsage(ctx context.Context, rows []usage.Row) error {
	tx, err := c.write.BeginTx(ctx, nil)
	if err != nil {
		return fail("store usage", c.markReadOnly(err))
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage_minutes
		(namespace, rule, minute_ms, allowed, denied, shadow_denied, degraded, shed, units)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (namespace, rule, minute_ms) DO UPDATE SET
		allowed = usage_minutes.allowed + excluded.allowed,
		denied = usage_minutes.denied + excluded.denied,
		shadow_denied = usage_minutes.shadow_denied + excluded.shadow_denied,
		degraded = usage_minutes.degraded + excluded.degraded,
		shed = usage_minutes.shed + excluded.shed,
		units = usage_minutes.units + excluded.units`)
	if err != nil {
		return fail("store usage", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.Namespace, r.Rule, r.Minute.UnixMilli(),
			r.Allowed, r.Denied, r.ShadowDenied, r.Degraded, r.Shed, r.Units); err != nil {
			return fail("store usage", c.markReadOnly(err))
		}
	}
	return fail("store usage", c.markReadOnly(tx.Commit()))
}

// Usage returns the stored minutes of namespace's rule (every rule when
// rule is "") in [from, to), oldest first.
func (c *Catalog) Usage(ctx context.Context, namespace, rule string, from, to time.Time) ([]usage.Row, error) {
	if namespace == "" {
		return nil, fmt.Errorf("read usage: the namespace (tenant or domain) is required: %w", sluice.ErrInvalid)
	}
	if !from.Before(to) {
		return nil, fmt.Errorf("read usage: from (%s) must be before to (%s): %w", from.Format(time.RFC3339), to.Format(time.RFC3339), sluice.ErrInvalid)
	}
	rows, err := c.read.QueryContext(ctx, `SELECT namespace, rule, minute_ms, allowed, denied, shadow_denied, degraded, shed, units
		FROM usage_minutes WHERE namespace = $1 AND ($2 = '' OR rule = $2) AND minute_ms >= $3 AND minute_ms < $4
		ORDER BY minute_ms, rule`+c.dialect.ByteOrder, namespace, rule, from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fail("read usage", err)
	}
	defer rows.Close()
	var out []usage.Row
	for rows.Next() {
		var r usage.Row
		var ms int64
		if err := rows.Scan(&r.Namespace, &r.Rule, &ms, &r.Allowed, &r.Denied, &r.ShadowDenied, &r.Degraded, &r.Shed, &r.Units); err != nil {
			return nil, fail("read usage", err)
		}
		r.Minute = time.UnixMilli(ms).UTC()
		out = append(out, r)
	}
	return out, fail("read usage", rows.Err())
}

// PruneUsage deletes the stored minutes before before, at most about limit
// rows a call (every row of the oldest limit minutes' rules), and returns
// how many it deleted: one short statement, as PruneAudit.
func (c *Catalog) PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("prune usage rollups: batch size must be positive, got %d: %w", limit, sluice.ErrInvalid)
	}
	res, err := c.write.ExecContext(ctx, `DELETE FROM usage_minutes WHERE minute_ms < $1 AND minute_ms IN
		(SELECT minute_ms FROM usage_minutes WHERE minute_ms < $1 ORDER BY minute_ms LIMIT $2)`,
		before.UnixMilli(), limit)
	if err != nil {
		return 0, fail("prune usage rollups", c.markReadOnly(err))
	}
	n, err := res.RowsAffected()
	return n, fail("prune usage rollups", err)
}

// RunUsageRetention deletes the stored minutes older than retention, in the
// background of a serving process, until ctx ends.
func (c *Catalog) RunUsageRetention(ctx context.Context, retention time.Duration, log *slog.Logger) {
	runRetention(ctx, "usage rollups", "rows", retention, c.PruneUsage, log)
}
