package guard

import (
	"context"
	"errors"
	"time"

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
	sh := g.shardOf(t.Tenant, t.Rule, t.Subject)
	var res sluice.TopUpResult
	_, err := sh.breaker.Execute(func() (sluice.Decision, error) {
		start := time.Now()
		var err error
		callCtx, c := g.callContext(ctx, sh, start)
		res, err = cs.TopUp(callCtx, t)
		c.leave()
		return sluice.Decision{}, g.judge(ctx, c.ctx, sh, start, err)
	})
	if err == nil {
		return res, nil
	}
	var gone *callerGone
	switch {
	case errors.Is(err, sluice.ErrInvalid), errors.Is(err, ErrOverloaded):
		return sluice.TopUpResult{}, err
	case errors.As(err, &gone):
		return sluice.TopUpResult{}, gone.err
	}
	return sluice.TopUpResult{}, unavailable(err)
}
