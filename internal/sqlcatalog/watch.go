package sqlcatalog

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/sluicelabs/sluice"
)

// pollTimeout bounds one look at the version. A connection that went silent
// (a partition, a failover: no reset, no close) would otherwise hold Watch
// until TCP gives up, many minutes in which no change arrives, not even a
// revoked key; timing out drops that connection and the next look takes a
// fresh one.
const pollTimeout = 2 * time.Second

// Watch reports catalog changes and subject resets (see sluice.Catalog). It
// reads the version every Dialect.PollInterval, and at once when the
// dialect's Listen wakes it, so a lost notification or a dropped listening
// connection delays a change by at most the interval. Failed looks are
// retried at the next one, and reported (see ReportWatchErrors).
func (c *Catalog) Watch(ctx context.Context, fn func(sluice.Event)) error {
	var version, lastReset int64
	err := c.read.QueryRowContext(ctx, "SELECT version, reset_seq FROM catalog_state WHERE id = 1").Scan(&version, &lastReset)
	if err != nil {
		return fmt.Errorf("watch the %s catalog: read the version: %w", c.dialect.Name, err)
	}
	fn(sluice.Event{Version: version})

	ctx, cancel := context.WithCancel(ctx)
	report := c.watchReporter()
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	if c.dialect.Listen != nil {
		signal := func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		wg.Go(func() { c.dialect.Listen(ctx, signal, report.failed) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	tick := time.NewTicker(c.dialect.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.closed:
			return nil
		case <-wake:
		case <-tick.C:
		}
		pollCtx, cancelPoll := context.WithTimeout(ctx, pollTimeout)
		events, err := c.changesSince(pollCtx, &version, &lastReset)
		cancelPoll()
		if err != nil {
			if ctx.Err() == nil {
				report.failed(fmt.Errorf("read catalog changes: %w", err))
			}
			continue
		}
		report.succeeded()
		for _, e := range events {
			fn(e)
		}
	}
}

// changesSince reads what changed after version and the reset numbered
// lastReset, advancing both: the resets published since, then the new
// version if it moved.
func (c *Catalog) changesSince(ctx context.Context, version, lastReset *int64) ([]sluice.Event, error) {
	var events []sluice.Event
	err := c.view(ctx, func(tx *sql.Tx) error {
		var v, resetSeq int64
		if err := tx.QueryRowContext(ctx, "SELECT version, reset_seq FROM catalog_state WHERE id = 1").Scan(&v, &resetSeq); err != nil {
			return err
		}
		if resetSeq > *lastReset {
			rows, err := tx.QueryContext(ctx, "SELECT tenant, rule, subject FROM subject_resets WHERE id > $1 AND id <= $2 ORDER BY id", *lastReset, resetSeq)
			resets, err := collect(rows, err, func(r scanner) (sluice.SubjectReset, error) {
				var x sluice.SubjectReset
				return x, r.Scan(&x.Tenant, &x.Rule, &x.Subject)
			})
			if err != nil {
				return err
			}
			for _, r := range resets {
				events = append(events, sluice.Event{Version: *version, Reset: &r})
			}
		}
		if v != *version {
			events = append(events, sluice.Event{Version: v})
		}
		*version, *lastReset = v, max(resetSeq, *lastReset)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// watchReporter logs the errors of one Watch call, each distinct one once
// until a look succeeds again, so a database down for an hour is one line
// rather than thousands, and counts every one.
type watchReporter struct {
	c       *Catalog
	dialect string
	mu      sync.Mutex
	logged  map[string]bool
}

// maxDistinct bounds the errors remembered as logged.
const maxDistinct = 32

func (c *Catalog) watchReporter() *watchReporter {
	return &watchReporter{c: c, dialect: c.dialect.Name, logged: make(map[string]bool)}
}

func (r *watchReporter) failed(err error) {
	r.c.reportMu.Lock()
	log, count := r.c.watchLog, r.c.onError
	r.c.reportMu.Unlock()
	if count != nil {
		count()
	}
	r.mu.Lock()
	// Past maxDistinct, errors that vary (an address, a port) would grow the
	// set without end: they are counted but no longer logged.
	first := !r.logged[err.Error()] && len(r.logged) < maxDistinct
	if first {
		r.logged[err.Error()] = true
	}
	r.mu.Unlock()
	if first && log != nil {
		log.Warn("catalog watch failed; retrying (each distinct error is logged once until the catalog answers again)",
			"database", r.dialect, "error", err)
	}
}

func (r *watchReporter) succeeded() {
	r.mu.Lock()
	recovered := len(r.logged) > 0
	clear(r.logged)
	r.mu.Unlock()
	if !recovered {
		return
	}
	r.c.reportMu.Lock()
	log := r.c.watchLog
	r.c.reportMu.Unlock()
	if log != nil {
		log.Info("catalog watch recovered", "database", r.dialect)
	}
}
