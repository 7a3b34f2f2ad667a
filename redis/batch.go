package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/scriptbatch"
)

// Concurrent plain checks (buckets and windows, on Redis's clock, no hold
// or lease) bound for one node go as batches (see internal/scriptbatch):
// one call of check.lua's batch mode decides them one after another at one
// instant, each all-or-nothing on its own keys, exactly as separate calls
// in that order would. Only on a single Redis or a Sentinel's master: on a
// Cluster a batch would name keys of several slots. With replica acks the
// group commit (groupcommit.go) batches instead.

// newCheckBatcher batches plain checks on client.
func newCheckBatcher(client rueidis.Client) *scriptbatch.Batcher[scriptCall, []rueidis.RedisMessage] {
	return &scriptbatch.Batcher[scriptCall, []rueidis.RedisMessage]{
		Exec: func(ctx context.Context, calls []scriptCall) ([][]rueidis.RedisMessage, error) {
			return execBatch(ctx, client, calls, "")
		},
		One: func(ctx context.Context, c scriptCall) ([]rueidis.RedisMessage, error) {
			return checkScript.Exec(ctx, client, c.keys, c.args).ToArray()
		},
	}
}

// batchable reports whether req is a plain check that may share a call:
// check.lua's plain_check decides it the same alone or in a batch.
func batchable(req sluice.Request) bool {
	if !req.Now.IsZero() || req.Holds() {
		return false // an injected clock is the call's own; holds are not plain
	}
	for _, l := range req.Limits {
		switch {
		case l.Calendar != "":
			return false
		case l.Algorithm == sluice.AlgorithmTokenBucket, l.Algorithm == sluice.AlgorithmSlidingWindow,
			l.Algorithm == sluice.AlgorithmFixedWindow:
		default:
			return false
		}
	}
	return true
}

// execBatch decides calls, plain checks, in one call of check.lua's batch
// mode at now ("" for Redis's TIME) and returns each one's reply.
func execBatch(ctx context.Context, client rueidis.Client, calls []scriptCall, now string) ([][]rueidis.RedisMessage, error) {
	nkeys, nargs := 0, 2
	for _, c := range calls {
		nkeys += len(c.keys)
		nargs += 1 + len(c.args)
	}
	keys := make([]string, 0, nkeys)
	args := make([]string, 2, nargs)
	args[0], args[1] = "B", now
	for _, c := range calls {
		keys = append(keys, c.keys...)
		args = append(args, strconv.Itoa(len(c.keys)))
		args = append(args, c.args...)
	}
	reply, err := checkScript.Exec(ctx, client, keys, args).ToArray()
	if err != nil {
		return nil, err
	}
	out := make([][]rueidis.RedisMessage, len(calls))
	at := 0
	for i, c := range calls {
		n := 3 + 4*len(c.keys)
		if at+n > len(reply) {
			return nil, fmt.Errorf("batch of %d checks: script replied %d values, short of check %d's", len(calls), len(reply), i+1)
		}
		out[i] = reply[at : at+n : at+n]
		at += n
	}
	return out, nil
}
