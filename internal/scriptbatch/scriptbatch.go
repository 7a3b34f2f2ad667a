// Package scriptbatch sends concurrent Redis script calls of one kind as
// batches: one script call decides several checks. A script call has a
// fixed cost in Redis beyond its checks' own work (the call, its TIME, the
// script's set-up: about a third of a one-limit check's CPU there, see
// BENCHMARKS.md, issue 29), and Redis's CPU is what every instance of a
// fleet shares.
//
// No call waits for a timer or for a batch to fill. Up to InFlight calls
// are in flight at once; a call that finds one free is sent at once, alone.
// Only a call that finds them all busy queues, and the queue goes as one
// batch as soon as a call comes back: a batch is what arrived during one
// round trip, so batches form only under load, where Redis would otherwise
// queue the same checks one call at a time.
package scriptbatch

import (
	"context"
	"sync"
)

// InFlight is how many calls may be in flight at once before calls queue
// for a batch.
const InFlight = 4

// MaxBatch bounds a batch, so one script call never holds Redis for an
// unbounded time.
const MaxBatch = 128

// Batcher batches calls of type C with replies of type R. Exec runs calls,
// in order, as one script call, and returns each one's reply; One runs a
// call that goes alone.
type Batcher[C, R any] struct {
	Exec func(ctx context.Context, calls []C) ([]R, error)
	One  func(ctx context.Context, call C) (R, error)

	mu       sync.Mutex
	inflight int
	queue    []*waiting[C, R]
}

type waiting[C, R any] struct {
	ctx   context.Context
	call  C
	reply R
	err   error
	done  chan struct{} // closed when reply or err is set
}

// Do runs call, alone or in a batch, and returns its own reply.
func (b *Batcher[C, R]) Do(ctx context.Context, call C) (R, error) {
	b.mu.Lock()
	if b.inflight < InFlight {
		// The queue is empty whenever a slot is free: send this one now.
		b.inflight++
		b.mu.Unlock()
		reply, err := b.One(ctx, call)
		b.finished()
		return reply, err
	}
	w := &waiting[C, R]{ctx: ctx, call: call, done: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case <-w.done:
		return w.reply, w.err
	case <-ctx.Done():
		// The batch may still run this call, as any call whose answer was
		// not awaited; one not yet sent is dropped (see send).
		var none R
		return none, ctx.Err()
	}
}

// finished ends one call in flight. A queue that formed meanwhile goes
// next on this slot, from a goroutine of its own, so the caller that freed
// the slot has its answer now.
func (b *Batcher[C, R]) finished() {
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

// take removes up to MaxBatch calls from the queue; b.mu is held.
func (b *Batcher[C, R]) take() []*waiting[C, R] {
	n := min(len(b.queue), MaxBatch)
	batch := b.queue[:n:n]
	if n == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = append([]*waiting[C, R](nil), b.queue[n:]...)
	}
	return batch
}

// run sends batches on one slot until the queue is empty.
func (b *Batcher[C, R]) run(batch []*waiting[C, R]) {
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

// send runs the calls of batch still awaited as one script call and hands
// each its own reply.
func (b *Batcher[C, R]) send(batch []*waiting[C, R]) {
	live := batch[:0]
	for _, w := range batch {
		if w.ctx.Err() != nil {
			continue // abandoned before it was sent: it changes nothing
		}
		live = append(live, w)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		w := live[0]
		w.reply, w.err = b.One(w.ctx, w.call)
		close(w.done)
		return
	}
	calls := make([]C, len(live))
	for i, w := range live {
		calls[i] = w.call
	}
	ctx, cancel := batchContext(live)
	replies, err := b.Exec(ctx, calls)
	cancel()
	for i, w := range live {
		if err != nil {
			w.err = err
		} else {
			w.reply = replies[i]
		}
		close(w.done)
	}
}

// batchContext lives as long as the batch's last caller waits; an earlier
// caller whose deadline passes stops waiting on its own.
func batchContext[C, R any](batch []*waiting[C, R]) (context.Context, context.CancelFunc) {
	latest, _ := batch[0].ctx.Deadline()
	for _, w := range batch {
		dl, ok := w.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
