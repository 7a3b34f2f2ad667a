package guard

import (
	"context"
	"errors"
	"time"

	"github.com/sluicelabs/sluice"
)

// storeCall runs op on the primary store for shard sh, within the deadline
// and behind sh's breaker, judged as a check's call is: what every store
// call but Check's shares (Check also reads the decision the breaker sees).
func storeCall[T any](g *Guard, ctx context.Context, sh *shard, op func(context.Context) (T, error)) (T, error) {
	var out T
	_, err := sh.breaker.Execute(func() (sluice.Decision, error) {
		start := time.Now()
		callCtx, c := g.callContext(ctx, sh, start)
		var err error
		out, err = op(callCtx)
		c.leave()
		return sluice.Decision{}, g.judge(ctx, c.ctx, sh, start, err)
	})
	return out, err
}

// shardOfTag is the shard of a hold or lease ID's hash tag (the first when
// the store is not sharded or the tag is unknown to it).
func (g *Guard) shardOfTag(tag string) *shard {
	if ts, ok := g.sharded.(tagSharded); ok {
		if i := ts.ShardOfTag(tag); i >= 0 && i < len(g.shards) {
			return &g.shards[i]
		}
	}
	return &g.shards[0]
}

// holdError is the error of a hold or lease call as their callers see it:
// bad input, a shed call and the caller's own end as they are; anything
// else the store's unavailability.
func holdError(err error) error {
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

// changeError is the error of a reset or a top-up: as holdError, but a
// store failure says whether the breaker is open (unavailable).
func changeError(err error) error {
	var gone *callerGone
	switch {
	case err == nil, errors.Is(err, sluice.ErrInvalid), errors.Is(err, ErrOverloaded):
		return err
	case errors.As(err, &gone):
		return gone.err
	}
	return unavailable(err)
}
