package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicelabs/sluice"
)

// Watch reports catalog changes and subject resets (see sluice.Catalog). A
// notification on Channel makes it look at once; without one it still looks
// every PollInterval, so a lost notification or a dropped listening
// connection delays a change by at most that.
func (c *Catalog) Watch(ctx context.Context, fn func(sluice.Event)) error {
	w := watcher{c: c, fn: fn}
	if err := w.start(ctx); err != nil {
		return fmt.Errorf("watch catalog: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { c.listen(ctx, wake) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	tick := time.NewTicker(PollInterval)
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
		// An error here is a database hiccup; the next tick retries.
		pollCtx, cancelPoll := context.WithTimeout(ctx, pollTimeout)
		_ = w.poll(pollCtx)
		cancelPoll()
	}
}

// pollTimeout bounds one look at the version. A connection that went silent
// (a partition, a failover: no reset, no close) would otherwise hold Watch
// until TCP gives up, many minutes in which no change arrives, not even a
// revoked key; timing out drops that connection and the next look takes a
// fresh one.
const pollTimeout = 2 * time.Second

// watcher remembers what one Watch call has reported.
type watcher struct {
	c           *Catalog
	fn          func(sluice.Event)
	version     int64
	lastResetID int64
}

func (w *watcher) start(ctx context.Context) error {
	err := w.c.pool.QueryRow(ctx, "SELECT version, reset_seq FROM catalog_state WHERE id = 1").Scan(&w.version, &w.lastResetID)
	if err != nil {
		return err
	}
	w.fn(sluice.Event{Version: w.version})
	return nil
}

// poll reports resets published since the last look, then a new version.
func (w *watcher) poll(ctx context.Context) error {
	var version, resetSeq int64
	err := w.c.pool.QueryRow(ctx, "SELECT version, reset_seq FROM catalog_state WHERE id = 1").Scan(&version, &resetSeq)
	if err != nil {
		return err
	}
	if resetSeq > w.lastResetID {
		rows, err := w.c.pool.Query(ctx, "SELECT id, tenant, rule, subject FROM subject_resets WHERE id > $1 AND id <= $2 ORDER BY id", w.lastResetID, resetSeq)
		if err != nil {
			return err
		}
		type reset struct {
			id int64
			sluice.SubjectReset
		}
		resets, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reset, error) {
			var x reset
			err := r.Scan(&x.id, &x.Tenant, &x.Rule, &x.Subject)
			return x, err
		})
		if err != nil {
			return err
		}
		for _, r := range resets {
			w.fn(sluice.Event{Version: w.version, Reset: &r.SubjectReset})
		}
		w.lastResetID = resetSeq
	}
	if version != w.version {
		w.version = version
		w.fn(sluice.Event{Version: version})
	}
	return nil
}

// listen holds a dedicated connection LISTENing on Channel and signals wake
// on every notification, reconnecting with backoff until ctx ends. After a
// reconnect it signals too, for what may have been missed meanwhile.
func (c *Catalog) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := c.listenOnce(ctx, signal)
		if ctx.Err() != nil {
			return
		}
		_ = err // the poll covers the gap; nothing to report to the caller
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

func (c *Catalog) listenOnce(ctx context.Context, signal func()) error {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
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
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		signal()
	}
}
