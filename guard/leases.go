package guard

import (
	"context"
	"errors"
	"time"

	"github.com/sluicelabs/sluice"
)

// ErrLeasesUnsupported is returned by Lease and ReturnLease when the
// primary store does not lease; callers check directly instead.
var ErrLeasesUnsupported = errors.New("the store does not lease quota")

// Leases reports whether the primary store leases quota.
func (g *Guard) Leases() bool {
	_, ok := g.primary.(sluice.Leaser)
	return ok
}

// Lease asks the primary store for a lease, within the deadline and behind
// the breaker of the subject like a check. There is no failure policy here:
// on any error the caller checks directly (through Check), where the rule's
// failure mode applies.
func (g *Guard) Lease(ctx context.Context, req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	leaser, ok := g.primary.(sluice.Leaser)
	if !ok {
		return sluice.LeaseGrant{}, ErrLeasesUnsupported
	}
	sh := g.shardOf(req.Tenant, req.Rule, req.Subject)
	var grant sluice.LeaseGrant
	_, err := sh.breaker.Execute(func() (sluice.Decision, error) {
		start := time.Now()
		callCtx, c := g.callContext(ctx, sh, start)
		var err error
		grant, err = leaser.Lease(callCtx, req)
		c.leave()
		return grant.Decision, g.judge(ctx, c.ctx, sh, start, err)
	})
	return grant, leaseError(err)
}

// ReturnLease gives a lease's unused units back on the primary store,
// within the deadline and behind the breaker of the lease's subject.
func (g *Guard) ReturnLease(ctx context.Context, ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	leaser, ok := g.primary.(sluice.Leaser)
	if !ok {
		return sluice.LeaseReturnResult{}, ErrLeasesUnsupported
	}
	tag, _, err := sluice.SplitHoldID(ret.ID)
	if err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	sh := &g.shards[0]
	if ts, ok := g.sharded.(tagSharded); ok {
		if i := ts.ShardOfTag(tag); i >= 0 && i < len(g.shards) {
			sh = &g.shards[i]
		}
	}
	var res sluice.LeaseReturnResult
	_, err = sh.breaker.Execute(func() (sluice.Decision, error) {
		start := time.Now()
		callCtx, c := g.callContext(ctx, sh, start)
		var err error
		res, err = leaser.ReturnLease(callCtx, ret)
		c.leave()
		return sluice.Decision{}, g.judge(ctx, c.ctx, sh, start, err)
	})
	return res, leaseError(err)
}

// leaseError is err as Hold reports it.
func leaseError(err error) error {
	if err == nil {
		return nil
	}
	var gone *callerGone
	switch {
	case errors.Is(err, sluice.ErrInvalid), errors.Is(err, ErrOverloaded), errors.Is(err, sluice.ErrStoreUnavailable):
		return err
	case errors.As(err, &gone):
		return gone.err
	}
	return errors.Join(sluice.ErrStoreUnavailable, err)
}

// Fallback answers req by mode as Check does once the store failed with
// cause: for a lease call that could not reach the store, whose request the
// rule's failure mode then decides.
func (g *Guard) Fallback(ctx context.Context, req sluice.Request, mode sluice.FailureMode, cause error) (sluice.Decision, error) {
	return g.fallback(ctx, req, mode, cause)
}
