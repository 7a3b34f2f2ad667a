package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
)

// Batching of plain checks. A script call has a fixed cost in Redis beyond
// its checks' own work: the call, its TIME and the script's set-up are
// about a third of a one-limit check's CPU there (BENCHMARKS.md, issue 29),
// and Redis's CPU is what every instance of a fleet shares. So concurrent
// plain checks (buckets and windows, on Redis's clock, no hold or lease)
// bound for one node go as one call of check.lua's batch mode, which
// decides them one after another at one instant, each all-or-nothing on
// its own keys, exactly as separate calls in that order would.
//
// No check waits for a timer or a batch to fill. Up to checkBatchesInFlight
// calls are in flight at once; a check that finds one free is sent at once,
// alone, as before. Only a check that finds them all busy queues, and the
// queue goes as one batch as soon as a call comes back: a batch is what
// arrived during one round trip, so it forms only under load, where Redis
// would otherwise queue the same checks one call at a time.
//
// Only on a single Redis or a Sentinel's master: on a Cluster the checks of
// one batch would name keys of several slots. With replica acks the group
// commit (groupcommit.go) batches instead.

// checkBatchesInFlight is how many calls of plain checks may be in flight
// at once before checks queue for a batch.
const checkBatchesInFlight = 4

// maxCheckBatch bounds a batch, so one call never holds Redis for an
// unbounded time.
const maxCheckBatch = 128

type checkBatcher struct {
	client   rueidis.Client
	mu       sync.Mutex
	inflight int
	queue    []*batchCall
}

// batchCall is one plain check in a batch.
type batchCall struct {
	ctx   context.Context
	call  scriptCall
	reply []rueidis.RedisMessage
	err   error
	done  chan struct{} // closed when reply or err is set
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

// do runs call, alone or in a batch, and returns its own reply.
func (b *checkBatcher) do(ctx context.Context, call scriptCall) ([]rueidis.RedisMessage, error) {
	b.mu.Lock()
	if b.inflight < checkBatchesInFlight {
		// The queue is empty whenever a call is free: send this one now.
		b.inflight++
		b.mu.Unlock()
		reply, err := checkScript.Exec(ctx, b.client, call.keys, call.args).ToArray()
		b.finished()
		return reply, err
	}
	c := &batchCall{ctx: ctx, call: call, done: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		// The batch may still run this check: as any call whose answer
		// was not awaited. One not yet sent is dropped (see send).
		return nil, ctx.Err()
	}
}

// finished ends one call in flight; a queue that formed meanwhile goes
// next, on this slot, from a goroutine of its own, so the caller that
// freed the slot gets its answer now.
func (b *checkBatcher) finished() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	batch := b.take()
	b.mu.Unlock()
	go b.run(batch)
}

// take removes up to maxCheckBatch calls from the queue; b.mu is held.
func (b *checkBatcher) take() []*batchCall {
	n := min(len(b.queue), maxCheckBatch)
	batch := b.queue[:n:n]
	if n == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = append([]*batchCall(nil), b.queue[n:]...)
	}
	return batch
}

// run sends batches on one slot until the queue is empty.
func (b *checkBatcher) run(batch []*batchCall) {
	for {
		b.send(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch = b.take()
		b.mu.Unlock()
	}
}

// send decides the calls of batch still awaited in one script call and
// hands each its own part of the reply.
func (b *checkBatcher) send(batch []*batchCall) {
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() != nil {
			continue // abandoned before it was sent: it changes nothing
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.reply, c.err = checkScript.Exec(c.ctx, b.client, c.call.keys, c.call.args).ToArray()
		close(c.done)
		return
	}
	calls := make([]scriptCall, len(live))
	for i, c := range live {
		calls[i] = c.call
	}
	ctx, cancel := batchContext(live)
	reply, err := execBatch(ctx, b.client, calls, "")
	cancel()
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.reply = reply[i]
		}
		close(c.done)
	}
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

// batchContext lives as long as the batch's last caller waits; an earlier
// caller whose deadline passes stops waiting on its own.
func batchContext(batch []*batchCall) (context.Context, context.CancelFunc) {
	latest, _ := batch[0].ctx.Deadline()
	for _, c := range batch {
		dl, ok := c.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
