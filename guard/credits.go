package guard

import (
	"context"

	"github.com/sluicelabs/sluice"
)

// TopUp tops up a credits balance on the primary store, within the deadline
// and through the breaker of the subject's shard. It never falls back to the
// local store: a balance is only worth what the shared store holds.
func (g *Guard) TopUp(ctx context.Context, t sluice.TopUp) (sluice.TopUpResult, error) {
	cs, ok := g.primary.(sluice.CreditStore)
	if !ok {
		return sluice.TopUpResult{}, sluice.ErrCreditsUnsupported
	}
	if err := t.Validate(); err != nil {
		return sluice.TopUpResult{}, err
	}
	res, err := storeCall(g, ctx, g.shardOf(t.Tenant, t.Rule, t.Subject), func(ctx context.Context) (sluice.TopUpResult, error) {
		return cs.TopUp(ctx, t)
	})
	if err != nil {
		return sluice.TopUpResult{}, changeError(err)
	}
	return res, nil
}
