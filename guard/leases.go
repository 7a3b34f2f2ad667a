package guard

import (
	"context"
	"errors"

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
	grant, err := storeCall(g, ctx, g.shardOf(req.Tenant, req.Rule, req.Subject), func(ctx context.Context) (sluice.LeaseGrant, error) {
		return leaser.Lease(ctx, req)
	})
	return grant, holdError(err)
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
	res, err := storeCall(g, ctx, g.shardOfTag(tag), func(ctx context.Context) (sluice.LeaseReturnResult, error) {
		return leaser.ReturnLease(ctx, ret)
	})
	return res, holdError(err)
}

// Fallback answers req by mode as Check does once the store failed with
// cause: for a lease call that could not reach the store, whose request the
// rule's failure mode then decides.
func (g *Guard) Fallback(ctx context.Context, req sluice.Request, mode sluice.FailureMode, cause error) (sluice.Decision, error) {
	return g.fallback(ctx, req, mode, cause)
}
