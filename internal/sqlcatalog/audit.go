package sqlcatalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

// record is what one change did, for the audit log.
type record struct {
	action, tenant, target string
	// generation is the tenant's (0 for the admin token, or a tenant
	// created before generations were recorded).
	generation    int64
	before, after any
}

// writeAudit records rec as made by ctx's actor, in tx.
func (c *Catalog) writeAudit(ctx context.Context, tx *sql.Tx, rec record) error {
	before, err := auditJSON(rec.before)
	if err != nil {
		return err
	}
	after, err := auditJSON(rec.after)
	if err != nil {
		return err
	}
	var id int64
	if err := tx.QueryRowContext(ctx, "UPDATE catalog_state SET audit_seq = audit_seq + 1 WHERE id = 1 RETURNING audit_seq").Scan(&id); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO audit_log (id, at_ms, actor, tenant, tenant_generation, action, target, before_json, after_json)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		id, c.millis(), sluice.ActorOf(ctx), rec.tenant, rec.generation, rec.action, rec.target, before, after)
	if err != nil {
		return fmt.Errorf("record the change in the audit log: %w", err)
	}
	return nil
}

// auditJSON encodes v in its admin API form; nil stays NULL.
func auditJSON(v any) (*string, error) {
	var doc any
	switch v := v.(type) {
	case nil:
		return nil, nil
	case sluice.Tenant:
		doc = adminapi.NewTenant(v)
	case sluice.APIKey:
		doc = adminapi.NewKey(v)
	case sluice.Rule:
		doc = adminapi.NewRule(v)
	case sluice.Override:
		doc = adminapi.NewOverride(v)
	case sluice.SubjectReset:
		doc = resetDoc{Rule: v.Rule, Subject: v.Subject}
	case sluice.TopUp:
		doc = adminapi.NewTopUpRecord(v)
	default:
		return nil, fmt.Errorf("no audit form for %T", v)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// resetDoc is a subject reset as the audit log records it (the admin API has
// no body for it); every other change is recorded in its admin API form
// (package adminapi), which only ever gains fields, so old entries keep
// reading as they did.
type resetDoc struct {
	Rule    string `json:"rule"`
	Subject string `json:"subject"`
}

// tenantGeneration returns the tenant's generation, or ErrNotFound.
func tenantGeneration(ctx context.Context, tx *sql.Tx, name string) (int64, error) {
	var generation sql.NullInt64
	err := tx.QueryRowContext(ctx, "SELECT generation FROM tenants WHERE name = $1", name).Scan(&generation)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("tenant %q: %w", name, sluice.ErrNotFound)
	}
	return generation.Int64, err
}

// Audit returns the recorded changes q selects, newest first.
func (c *Catalog) Audit(ctx context.Context, q sluice.AuditQuery) ([]sluice.AuditEntry, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var entries []sluice.AuditEntry
	err := c.view(ctx, func(tx *sql.Tx) error {
		var where []string
		var args []any
		cond := func(sql string, arg any) {
			args = append(args, arg)
			where = append(where, fmt.Sprintf(sql, len(args)))
		}
		if q.Tenant != "" {
			cond("tenant = $%d", q.Tenant)
		}
		if q.CurrentTenantOnly {
			generation, err := tenantGeneration(ctx, tx, q.Tenant)
			if err != nil {
				return err
			}
			cond("tenant_generation = $%d", generation)
		}
		if q.Actor != "" {
			cond("actor = $%d", q.Actor)
		}
		if q.Action != "" {
			cond("action = $%d", q.Action)
		}
		if !q.Since.IsZero() {
			cond("at_ms >= $%d", q.Since.UnixMilli())
		}
		if !q.Until.IsZero() {
			cond("at_ms < $%d", q.Until.UnixMilli())
		}
		if q.Before > 0 {
			cond("id < $%d", q.Before)
		}
		limit := q.Limit
		if limit == 0 {
			limit = sluice.DefaultAuditLimit
		}
		query := "SELECT id, at_ms, actor, tenant, action, target, before_json, after_json FROM audit_log"
		if len(where) > 0 {
			query += " WHERE " + strings.Join(where, " AND ")
		}
		rows, err := tx.QueryContext(ctx, query+fmt.Sprintf(" ORDER BY id DESC LIMIT %d", limit), args...)
		entries, err = collect(rows, err, func(r scanner) (sluice.AuditEntry, error) {
			var e sluice.AuditEntry
			var at int64
			var before, after sql.NullString
			if err := r.Scan(&e.ID, &at, &e.Actor, &e.Tenant, &e.Action, &e.Target, &before, &after); err != nil {
				return e, err
			}
			e.Time = fromMillis(at)
			if before.Valid {
				e.Before = json.RawMessage(before.String)
			}
			if after.Valid {
				e.After = json.RawMessage(after.String)
			}
			return e, nil
		})
		return err
	})
	return entries, fail("read the audit log", err)
}

// PruneAudit deletes at most limit audit entries recorded before before,
// oldest first, and returns how many it deleted. Each call is one short
// statement, so a caller working through a large backlog in batches never
// holds the table for long.
func (c *Catalog) PruneAudit(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("prune the audit log: batch size must be positive, got %d: %w", limit, sluice.ErrInvalid)
	}
	res, err := c.write.ExecContext(ctx,
		"DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at_ms < $1 ORDER BY id LIMIT $2)",
		before.UnixMilli(), limit)
	if err != nil {
		return 0, fail("prune the audit log", c.markReadOnly(err))
	}
	n, err := res.RowsAffected()
	return n, fail("prune the audit log", err)
}

// Audit entries past their retention are deleted at the start of
// RunAuditRetention and then every auditPruneInterval, auditPruneBatch at a
// time with a pause between batches, so a long backlog never holds the
// table every tenant shares.
const (
	auditPruneInterval = time.Hour
	auditPruneBatch    = 1000
	auditPrunePause    = 100 * time.Millisecond
)

// RunAuditRetention deletes entries older than retention, in the
// background of a serving process, until ctx ends. A failed round is
// logged and retried at the next.
func (c *Catalog) RunAuditRetention(ctx context.Context, retention time.Duration, log *slog.Logger) {
	runRetention(ctx, "audit log", "entries", retention, c.PruneAudit, log)
}

// runRetention calls prune for what is older than retention, batch after
// batch, at once and then every auditPruneInterval, until ctx ends: the
// background deletion of the audit log and of the usage rollups. A failed
// round is logged and retried at the next; a round's count is logged under
// unit ("entries", "rows").
func runRetention(ctx context.Context, what, unit string, retention time.Duration,
	prune func(ctx context.Context, before time.Time, limit int) (int64, error), log *slog.Logger) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		before := time.Now().Add(-retention)
		var total int64
		for {
			n, err := prune(ctx, before, auditPruneBatch)
			total += n
			if err != nil {
				if ctx.Err() == nil {
					log.Warn(what+" pruning failed; retried at the next round", "error", err, "pruned", total)
				}
				break
			}
			if n < auditPruneBatch {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(auditPrunePause):
			}
		}
		if total > 0 {
			log.Info(what+" pruned", unit, total, "older_than", before.UTC().Format(time.RFC3339))
		}
		timer.Reset(auditPruneInterval)
	}
}
