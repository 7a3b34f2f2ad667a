package middleware

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/metrics"
)

// Holds in the middleware (see the root package's holds.go): when a check
// takes a hold (a concurrency limit's lease, or Options.Reserve), Handler
// keeps it for the next handler's whole run and gives it back when the
// handler returns, or panics: released, or settled with Options.Settle's
// actual cost, fed with the response's size or a value the handler reported
// with ReportCost.

// Finished is what Options.Settle learns of a request once its handler
// returned.
type Finished struct {
	// Status is the response status (200 when the handler wrote a body
	// without one; 0 when it wrote nothing).
	Status int
	// Bytes is the size of the response body written.
	Bytes int64
	// Reported is the last value the handler passed to ReportCost, and
	// HasReported says whether it did.
	Reported    int64
	HasReported bool
}

type reportKey struct{}

// ReportCost tells the middleware the actual cost of the request being
// served (tokens generated, rows scanned), for Options.Settle. It does
// nothing outside a request served by a Limiter that holds.
func ReportCost(ctx context.Context, cost int64) {
	if r, ok := ctx.Value(reportKey{}).(*reported); ok {
		r.cost.Store(cost)
		r.set.Store(true)
	}
}

type reported struct {
	cost atomic.Int64
	set  atomic.Bool
}

// holdTimeout bounds the store call that gives a hold back, which happens
// after the response, when the request's own context may be done.
const holdTimeout = 5 * time.Second

// serveHeld runs next with hold taken, and gives the hold back when next
// returns or panics.
func (l *Limiter) serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, hold *sluice.Hold) {
	rep := &reported{}
	counter := &countingWriter{ResponseWriter: w}
	r = r.WithContext(context.WithValue(r.Context(), reportKey{}, rep))
	returned := false
	defer func() {
		// A panic leaves returned false: the lease is released, the
		// estimate stands (nothing says what the request cost).
		op := sluice.HoldOp{Tenant: l.opts.Tenant, ID: hold.ID, Action: sluice.HoldRelease}
		if returned && l.opts.Settle != nil {
			op.Action = sluice.HoldSettle
			op.Cost = l.opts.Settle(r, Finished{Status: counter.status, Bytes: counter.bytes,
				Reported: rep.cost.Load(), HasReported: rep.set.Load()})
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), holdTimeout)
		defer cancel()
		res, err := l.engine.Hold(ctx, metrics.Labels{Source: l.opts.Source, Rule: l.opts.Name}, op)
		if err != nil || !res.Status.Applied() {
			l.logger().Warn("rate-limit middleware could not give a hold back; it frees at its TTL",
				"rule", l.opts.Name, "action", string(op.Action), "status", string(res.Status), "error", err)
		}
	}()
	next.ServeHTTP(counter, r)
	returned = true
}

func (l *Limiter) logger() *slog.Logger {
	if l.opts.Logger != nil {
		return l.opts.Logger
	}
	return slog.Default()
}

// countingWriter counts the body bytes written and keeps the status.
type countingWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (c *countingWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// deadlines).
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Hold gives back a hold of the remote service.
func (s *remoteStore) Hold(ctx context.Context, op sluice.HoldOp) (sluice.HoldResult, error) {
	var res sluice.HoldResult
	var err error
	switch op.Action {
	case sluice.HoldSettle:
		err = s.c.Settle(ctx, op.ID, op.Cost)
		res.Status = sluice.HoldSettled
	case sluice.HoldRelease:
		res.Status, err = s.c.Release(ctx, op.ID)
	case sluice.HoldExtend:
		res.ExpiresIn, res.Status, err = s.c.Extend(ctx, op.ID)
	}
	var e *client.Error
	if errors.As(err, &e) {
		switch e.Code {
		case "hold_expired":
			return sluice.HoldResult{Status: sluice.HoldExpired}, nil
		case "hold_finished":
			return sluice.HoldResult{Status: sluice.HoldFinished}, nil
		case "hold_not_found":
			return sluice.HoldResult{Status: sluice.HoldUnknown}, nil
		}
		if e.StatusCode == http.StatusBadRequest {
			return sluice.HoldResult{}, &remoteInvalid{e}
		}
	}
	return res, err
}
