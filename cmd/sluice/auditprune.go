package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicelabs/sluice"
)

// defaultAuditRetention keeps about six months of catalog changes.
const defaultAuditRetention = "180d"

// Audit entries older than --audit-retention are deleted at start and then
// every auditPruneInterval, auditPruneBatch at a time with a pause between
// batches, so a long backlog never holds the table every tenant shares.
const (
	auditPruneInterval = time.Hour
	auditPruneBatch    = 1000
	auditPrunePause    = 100 * time.Millisecond
)

// auditPruner is the catalog's pruning, as both SQL catalogs offer it.
type auditPruner interface {
	PruneAudit(ctx context.Context, before time.Time, limit int) (int64, error)
}

// auditRetention reads --audit-retention: a period such as 180d, or off
// (0 too) to keep every entry.
func (cfg serveConfig) auditRetention() (time.Duration, error) {
	switch cfg.AuditRetention {
	case "":
		cfg.AuditRetention = defaultAuditRetention
	case "off", "0":
		return 0, nil
	}
	d, err := sluice.ParseWindow(cfg.AuditRetention)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--audit-retention %q: want a period such as 180d, 4w or 2160h, or off to keep every entry", cfg.AuditRetention)
	}
	return d, nil
}

// pruneAudit deletes entries older than retention until ctx ends.
func pruneAudit(ctx context.Context, p auditPruner, retention time.Duration, log *slog.Logger) {
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
			n, err := p.PruneAudit(ctx, before, auditPruneBatch)
			total += n
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("audit log pruning failed; retried at the next round", "error", err, "pruned", total)
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
			log.Info("audit log pruned", "entries", total, "older_than", before.UTC().Format(time.RFC3339))
		}
		timer.Reset(auditPruneInterval)
	}
}
