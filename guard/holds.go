package guard

import (
	"context"

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
	res, err := storeCall(g, ctx, g.shardOfTag(tag), func(ctx context.Context) (sluice.HoldResult, error) {
		return holder.Hold(ctx, op)
	})
	if err != nil {
		return sluice.HoldResult{}, holdError(err)
	}
	return res, nil
}
