package check

import (
	"context"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/metrics"
)

// Holds (concurrency limits and reserve-then-settle, see the root package)
// are a stage of the engine like any check: a check that takes a hold goes
// through the deny cache, load shedding, the guard and metrics as above, and
// settling, releasing or extending one goes through the guard and metrics
// here, so every face gets them alike.
//
// The deny cache stays exact with holds:
//   - a deny that a concurrency limit took part in is never remembered: its
//     retry_after is an upper bound, since a release frees the limit sooner;
//   - a deny from rate limits alone is remembered as before, and serves any
//     later check, lease-taking or not: that check would be denied by the
//     same rate limits and take nothing;
//   - a settle that refunds adds quota without time passing, so it forgets
//     the subject's entries like a reset (any settle does, since the
//     cached figures would be stale). Only this process learns of it;
//     another instance's entry may deny the refunded quota until its own
//     retry_after, which errs on the safe side.

// concurrencyDenied reports whether a concurrency limit denied d.
func concurrencyDenied(d sluice.Decision) bool {
	for i := range d.Limits {
		if d.Limits[i].Algorithm == sluice.AlgorithmConcurrency && !d.Limits[i].Allowed {
			return true
		}
	}
	return false
}

// countLeases counts the leases a check took and the expired ones it found.
func (e *Engine) countLeases(r *Rule, req sluice.Request, d sluice.Decision) {
	if d.ExpiredLeases > 0 {
		e.metrics.LeasesEnded(r.series, metrics.LeaseExpired, d.ExpiredLeases)
	}
	if d.Hold == nil {
		return
	}
	n := int64(0)
	for i := range req.Limits {
		if req.Limits[i].Algorithm == sluice.AlgorithmConcurrency {
			n++
		}
	}
	e.metrics.LeasesTaken(r.series, n)
}

// Hold settles, releases or extends a hold of op.Tenant, counted under
// labels with the rule of the check that took it. A settle or release of a
// hold that expired, or was settled or released already, changes nothing
// and says so in the status; faces decide whether that is an error (a
// settle's is: the actual cost was not applied).
func (e *Engine) Hold(ctx context.Context, labels metrics.Labels, op sluice.HoldOp) (sluice.HoldResult, error) {
	res, err := e.guard.Hold(ctx, op)
	if err != nil {
		return res, err
	}
	if res.LeasesFreed > 0 {
		labels.Rule = res.Rule
		e.metrics.LeasesEnded(e.metrics.Series(labels), metrics.LeaseReleased, res.LeasesFreed)
	}
	if res.Status == sluice.HoldSettled {
		// A refund adds quota without time passing, and any settle moves
		// the counters a cached deny's figures were derived from.
		e.ForgetSubject(op.Tenant, res.Rule, res.Subject)
	}
	return res, nil
}
