package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// A store call's deadline is counted on this process's own clock, not on the
// wall: time this process spends unable to run (frozen, throttled by a
// cgroup's CPU quota, starved by neighbours, in a long GC pause) is not the
// store's time. A store that does not answer within Timeout of the process's
// running time is failing; a call that waits longer than MaxWait on the wall
// is this process past its capacity, and is shed (ErrOverloaded), never
// counted against the store.
//
// The process clock is kept by a watchdog goroutine that ticks every
// watchdogTick while calls are pending. Each beat advances the clock by the
// time since the last beat, but by no more than one tick: a beat that comes
// late shows the process could not run meanwhile, and that time does not
// count. The same goroutine expires the deadlines, so if the process does not
// run, nothing expires; when it runs again its first beat is the late one,
// before any deadline is judged, and the answers the store sent meanwhile are
// read as answers.
//
// Calls that start within one deadlineGranularity share one cancellable
// context (one allocation per tick rather than per call). The contexts carry
// no deadline of their own: rueidis then never puts a socket deadline on the
// connection (which would close it when a frozen process wakes past it), and
// pipelines the call with the others.

// watchdogTick is the beat of the process clock: the precision of a deadline
// and the smallest gap the clock recognises as this process not running.
const watchdogTick = 2 * time.Millisecond

// deadlineGranularity is how long one shared call context is handed to new
// calls; each call gets between Timeout and Timeout+deadlineGranularity (plus
// one tick) of the process's time.
const deadlineGranularity = time.Millisecond

// errStoreDeadline is the cause of a call that the store did not answer in
// Timeout of this process's running time.
var errStoreDeadline = errors.New("the store did not answer within the deadline (counted in this process's running time)")

// errMaxWait is the cause of a call that waited MaxWait on the wall clock
// while this process was mostly unable to run.
var errMaxWait = errors.New("the call waited past the maximum wait while this process could not run")

// deadlines keeps the process clock and expires the pending call contexts.
type deadlines struct {
	timeout time.Duration
	maxWait time.Duration

	// current is the cohort new calls join while it is fresh.
	current atomic.Pointer[cohort]

	mu sync.Mutex
	// pending are the cohorts not yet expired, oldest first: the oldest
	// expires first on either clock.
	pending []*cohort
	running bool  // the watchdog goroutine runs
	process int64 // the process clock, nanoseconds
	beat    int64 // wall monotonic nanoseconds of the last beat
	// stalled is the wall time the watchdog found this process unable to
	// run (nanoseconds), for tests and metrics.
	stalled atomic.Int64
}

// cohort is the context shared by the calls that start within one
// deadlineGranularity.
type cohort struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	created int64 // wall monotonic nanoseconds
	due     int64 // process clock at which the store deadline passes
	wallDue int64 // wall clock at which the maximum wait passes
}

func newDeadlines(timeout, maxWait time.Duration) *deadlines {
	return &deadlines{timeout: timeout, maxWait: maxWait}
}

// context returns the context of a store call sent at now (wall monotonic
// nanoseconds).
func (d *deadlines) context(now int64) context.Context {
	if c := d.current.Load(); c != nil && c.fresh(now) {
		return c.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.current.Load(); c != nil && c.fresh(now) {
		return c.ctx
	}
	if !d.running {
		d.running = true
		d.beat = now
		go d.watch()
	}
	// Since the last beat the process ran for at most one tick that the
	// clock does not show yet.
	process := d.process + min(max(now-d.beat, 0), int64(watchdogTick))
	ctx, cancel := context.WithCancelCause(context.Background())
	c := &cohort{ctx: ctx, cancel: cancel, created: now,
		due:     process + int64(d.timeout+deadlineGranularity+watchdogTick),
		wallDue: now + int64(d.maxWait)}
	d.pending = append(d.pending, c)
	d.current.Store(c)
	return ctx
}

func (c *cohort) fresh(now int64) bool {
	return now >= c.created && now-c.created < int64(deadlineGranularity) && c.ctx.Err() == nil
}

// watch beats the process clock and expires deadlines until no call is
// pending.
func (d *deadlines) watch() {
	ticker := time.NewTicker(watchdogTick)
	defer ticker.Stop()
	var expired []*cohort
	for range ticker.C {
		now := monotonic()
		d.mu.Lock()
		gap := now - d.beat
		d.beat = now
		d.process += min(gap, int64(watchdogTick))
		if gap > int64(watchdogTick) {
			d.stalled.Add(gap - int64(watchdogTick))
		}
		expired = expired[:0]
		n := 0
		for _, c := range d.pending {
			if d.process < c.due && now < c.wallDue {
				break
			}
			expired = append(expired, c)
			n++
		}
		clear(d.pending[:n])
		d.pending = d.pending[n:]
		done := len(d.pending) == 0
		if done {
			d.running = false
			d.pending = nil
		}
		process := d.process
		d.mu.Unlock()
		for _, c := range expired {
			if process >= c.due {
				c.cancel(errStoreDeadline)
			} else {
				c.cancel(errMaxWait)
			}
		}
		if done {
			return
		}
	}
}
