package guard

import (
	"context"
	"errors"
	"time"

	"github.com/sluicelabs/sluice"
)

// tagSharded is a Sharded store that also finds the shard of a subject tag,
// which is all a hold id tells of its subject.
type tagSharded interface {
	ShardOfTag(tag string) int
}

// Hold settles, releases or extends a hold on the primary store, within the
// deadline and behind the breaker of the hold's subject like a check. There
// is no failure policy to fall back on: a hold lives only in the store that
// took it, so a store that cannot answer is ErrStoreUnavailable (with
// ErrBreakerOpen when the breaker is open). A hold taken from a FailLocal
// fallback is unknown to the primary store.
func (g *Guard) Hold(ctx context.Context, op sluice.HoldOp) (sluice.HoldResult, error) {
	holder, ok := g.primary.(sluice.Holder)
	if !ok {
		return sluice.HoldResult{}, sluice.ErrHoldsUnsupported
	}
	tag, _, err := sluice.SplitHoldID(op.ID)
	if err != nil {
		return sluice.HoldResult{}, err
	}
	sh := &g.shards[0]
	if ts, ok := g.sharded.(tagSharded); ok {
		if i := ts.ShardOfTag(tag); i >= 0 && i < len(g.shards) {
			sh = &g.shards[i]
		}
	}
	var res sluice.HoldResult
	_, err = sh.breaker.Execute(func() (sluice.Decision, error) {
		start := time.Now()
		var err error
		callCtx, c := g.callContext(ctx, sh, start)
		res, err = holder.Hold(callCtx, op)
		c.leave()
		return sluice.Decision{}, g.judge(ctx, c.ctx, sh, start, err)
	})
	if err == nil {
		return res, nil
	}
	var gone *callerGone
	switch {
	case errors.Is(err, sluice.ErrInvalid), errors.Is(err, ErrOverloaded):
		return sluice.HoldResult{}, err
	case errors.As(err, &gone):
		return sluice.HoldResult{}, gone.err
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return sluice.HoldResult{}, err
	}
	return sluice.HoldResult{}, errors.Join(sluice.ErrStoreUnavailable, err)
}
