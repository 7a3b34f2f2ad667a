package redis

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Group commit of replicated writes. A WAIT counts the replicas that have
// every write its connection sent before it, and it blocks its connection,
// so rueidis sends a script paired with its WAIT on a dedicated connection:
// one connection, one write and one read on both sides per check, which
// made --redis-replica-acks 1 cost 3x the CPU per check under 64 callers
// (BENCHMARKS.md). Instead, writing checks queue, and a few committers each
// take whatever has queued and send it as one DoMulti: every script, then
// one WAIT, which covers them all. A check waits for no timer: a committer
// sends as soon as it is free, so a batch is what queued while the
// previous one was in flight (one replica round trip), and a lone caller's
// batch is its own check.
//
// Only where every script of a batch goes to one node: a single Redis or
// Sentinel's master. On a Cluster, a DoMulti splits by slot and one WAIT
// would answer for one node's writes only, so each check keeps its own.

// groupCommitters is how many batches may be in flight at once: with one,
// a check could wait for a whole batch round trip before its own is sent;
// more split the queue into smaller batches.
const groupCommitters = 4

// maxGroupCommit bounds a batch, so one DoMulti never holds the connection
// for an unbounded reply.
const maxGroupCommit = 256

type groupCommit struct {
	client  rueidis.Client
	acks    int64
	timeout time.Duration
	queue   chan *commitCall
	once    sync.Once
	stop    chan struct{}
	wg      sync.WaitGroup
}

// commitCall is one check's script waiting for its batch.
type commitCall struct {
	ctx    context.Context
	script rueidis.Completed
	done   chan commitResult // buffered: the committer never blocks on it
}

type commitResult struct {
	reply, acks rueidis.RedisResult
	waitMS      int64
	err         error // the batch was never sent
}

func newGroupCommit(client rueidis.Client, acks int64, timeout time.Duration) *groupCommit {
	return &groupCommit{client: client, acks: acks, timeout: timeout,
		queue: make(chan *commitCall, maxGroupCommit*groupCommitters), stop: make(chan struct{})}
}

// do sends script in the next batch and returns its reply and the batch's
// WAIT answer, or the caller's context's error if it ends first (the
// script may still run: as for any call whose answer was not awaited).
func (g *groupCommit) do(ctx context.Context, script rueidis.Completed) (commitResult, error) {
	g.once.Do(g.start)
	call := &commitCall{ctx: ctx, script: script, done: make(chan commitResult, 1)}
	select {
	case g.queue <- call:
	case <-ctx.Done():
		return commitResult{}, ctx.Err()
	case <-g.stop:
		return commitResult{}, rueidis.ErrClosing
	}
	select {
	case res := <-call.done:
		return res, res.err
	case <-ctx.Done():
		return commitResult{}, ctx.Err()
	case <-g.stop:
		return commitResult{}, rueidis.ErrClosing
	}
}

func (g *groupCommit) start() {
	for range groupCommitters {
		g.wg.Add(1)
		go g.commit()
	}
}

// close stops the committers; checks still queued answer rueidis's
// ErrClosing.
func (g *groupCommit) close() {
	g.once.Do(func() {}) // none start after close
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.wg.Wait()
	for {
		select {
		case call := <-g.queue:
			call.done <- commitResult{err: rueidis.ErrClosing}
		default:
			return
		}
	}
}

func (g *groupCommit) commit() {
	defer g.wg.Done()
	batch := make([]*commitCall, 0, maxGroupCommit)
	cmds := make(rueidis.Commands, 0, maxGroupCommit+1)
	for {
		batch = batch[:0]
		select {
		case call := <-g.queue:
			batch = append(batch, call)
		case <-g.stop:
			return
		}
	fill:
		for len(batch) < maxGroupCommit {
			select {
			case call := <-g.queue:
				batch = append(batch, call)
			default:
				break fill
			}
		}
		g.send(batch, cmds[:0])
	}
}

// send runs one batch: the scripts of the calls still waiting, then WAIT,
// bounded by the replica ack timeout and the soonest caller's deadline.
func (g *groupCommit) send(batch []*commitCall, cmds rueidis.Commands) {
	now := time.Now()
	timeout := g.timeout
	var latest time.Time
	noDeadline := false
	live := batch[:0]
	for _, call := range batch {
		if call.ctx.Err() != nil {
			continue // abandoned before it was sent: it changes nothing
		}
		if dl, ok := call.ctx.Deadline(); ok {
			timeout = min(timeout, dl.Sub(now))
			if dl.After(latest) {
				latest = dl
			}
		} else {
			noDeadline = true
		}
		live = append(live, call)
		cmds = append(cmds, call.script)
	}
	if len(live) == 0 {
		return
	}
	// WAIT 0 would wait for ever.
	waitMS := max(timeout.Milliseconds(), 1)
	cmds = append(cmds, g.client.B().Wait().Numreplicas(g.acks).Timeout(waitMS).Build())
	// The batch lives as long as its last caller waits; an earlier caller
	// whose deadline passes stops waiting on its own.
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if !noDeadline {
		ctx, cancel = context.WithDeadline(ctx, latest)
	}
	res := g.client.DoMulti(ctx, cmds...)
	cancel()
	acks := res[len(res)-1]
	for i, call := range live {
		call.done <- commitResult{reply: res[i], acks: acks, waitMS: waitMS}
	}
}
