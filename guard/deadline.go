package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// How a store is judged. A check waits for the store's answer, late if need
// be, while the store shows it is alive; it is failed by the rule's policy
// only when the store is unresponsive, and shed only when this process is
// past its capacity:
//
//   - A store call that has waited Timeout with no answer from its shard
//     since it was sent makes the shard suspect: a liveness probe of its own
//     (PING, where the store can be pinged) is sent. Any answer from the
//     shard, the probe's or a check's, clears the suspicion and the calls go
//     on waiting. If the shard answers nothing for another Timeout, it is
//     unresponsive: every call pending on it fails (a store failure, counted
//     by the breaker), so a hung store fails checks within two Timeouts.
//   - Both Timeouts count this process's running time, not the wall's: time
//     this process spends unable to run (frozen, throttled by a cgroup's CPU
//     quota, starved by neighbours, in a long GC pause) is not the store's.
//   - A call that has waited MaxWait on the wall clock is this process past
//     its capacity: it is shed (ErrOverloaded), never counted against the
//     store.
//
// The process clock is kept by a watchdog goroutine that beats every
// watchdogTick while calls are pending. Each beat advances the clock by the
// time since the last beat, but by no more than one tick: a beat that comes
// late shows the process could not run meanwhile, and that time does not
// count. The same goroutine judges the shards, so if the process does not run
// nothing is judged; when it runs again its first beat is the late one,
// before any judgement, and the answers the store sent meanwhile are read as
// answers.
//
// Calls to one shard that start within one deadlineGranularity share one
// cancellable context (a cohort; one allocation per tick rather than per
// call). Their own deadline is the maximum wait, on the wall clock, far
// enough that a socket deadline rueidis derives from it (which closes the
// connection when a frozen process wakes past it) only ever fires on a call
// past its wait anyway.

// watchdogTick is the beat of the process clock: the precision of the
// judgements and the smallest gap the clock recognises as this process not
// running.
const watchdogTick = time.Millisecond

// deadlineGranularity is how long one cohort takes new calls.
const deadlineGranularity = time.Millisecond

// errUnresponsive is the cause of the calls failed because their shard
// answered nothing, not even a liveness probe, for two Timeouts of this
// process's running time.
var errUnresponsive = errors.New("the store answered nothing, not even a liveness probe")

// errMaxWait is the cause of a call that waited MaxWait on the wall clock.
var errMaxWait = errors.New("the call waited past the maximum wait")

// deadlines keeps the process clock and judges the shards of one Guard.
type deadlines struct {
	timeout time.Duration
	maxWait time.Duration
	shards  []*shard
	// ping, if set, is the liveness probe of a store with one shard.
	ping func(context.Context) error

	mu      sync.Mutex
	running bool  // the watchdog goroutine runs
	process int64 // the process clock, nanoseconds
	beat    int64 // wall monotonic nanoseconds of the last beat
	// stalled is the wall time the watchdog found this process unable to
	// run (nanoseconds), for tests and metrics.
	stalled atomic.Int64
}

// shardWait is the part of a shard the deadlines keep.
type shardWait struct {
	// lastAnswered is when (monotonic nanoseconds since clockBase) this
	// shard last answered a call or a probe.
	lastAnswered atomic.Int64
	// current is the cohort new calls join while it is fresh.
	current atomic.Pointer[cohort]

	// Guarded by deadlines.mu.
	cohorts    []*cohort // oldest first
	suspect    bool      // a probe is out
	probeSent  int64     // wall, when the shard became suspect
	probeDue   int64     // process clock at which a silent shard is unresponsive
	probeAbort context.CancelFunc
}

// cohort is the context shared by the calls to one shard that start within
// one deadlineGranularity.
type cohort struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	created int64 // wall monotonic nanoseconds
	due     int64 // process clock at which a call still waiting makes its shard suspect
	wallDue int64 // wall clock at which the maximum wait passes
	// calls counts the calls waiting under this cohort; retired (negative)
	// once the watchdog dropped it, so a late joiner goes elsewhere.
	calls atomic.Int32
}

const retired = -1 << 30

func (d *deadlines) answered(sh *shard) {
	now := monotonic()
	if now > sh.lastAnswered.Load() {
		sh.lastAnswered.Store(now) // a lost race stores a time just as recent
	}
}

// join returns the cohort of a call to sh sent at now (wall monotonic
// nanoseconds); the caller calls leave when the call has returned.
func (d *deadlines) join(sh *shard, now int64) *cohort {
	for {
		c := sh.current.Load()
		if c == nil || !c.fresh(now) {
			c = d.newCohort(sh, now)
		}
		if c.calls.Add(1) > 0 {
			return c
		}
		c.calls.Add(-1) // retired meanwhile
		if sh.current.Load() == c {
			sh.current.CompareAndSwap(c, nil)
		}
	}
}

func (c *cohort) leave() { c.calls.Add(-1) }

func (c *cohort) fresh(now int64) bool {
	return now >= c.created && now-c.created < int64(deadlineGranularity) && c.ctx.Err() == nil
}

func (d *deadlines) newCohort(sh *shard, now int64) *cohort {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := sh.current.Load(); c != nil && c.fresh(now) && c.calls.Load() >= 0 {
		return c
	}
	if !d.running {
		d.running = true
		d.beat = now
		go d.watch()
	}
	// Since the last beat the process ran for at most one tick that the
	// clock does not show yet.
	process := d.process + min(max(now-d.beat, 0), int64(watchdogTick))
	// The maximum wait is also the context's own deadline: rueidis bounds
	// a connection's dial and handshake by it, and ignores a cancellation
	// there. It is far enough for a frozen process to wake before any socket
	// deadline derived from it.
	ctx, stop := context.WithDeadlineCause(context.Background(), clockBase.Add(time.Duration(now)+d.maxWait), errMaxWait)
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func(cause error) { cancelCause(cause); stop() }
	c := &cohort{ctx: ctx, cancel: cancel, created: now,
		due:     process + int64(d.timeout+deadlineGranularity),
		wallDue: now + int64(d.maxWait)}
	sh.cohorts = append(sh.cohorts, c)
	sh.current.Store(c)
	return c
}

// watch beats the process clock and judges the shards until no call is
// pending and no shard is suspect.
func (d *deadlines) watch() {
	ticker := time.NewTicker(watchdogTick)
	defer ticker.Stop()
	type verdict struct {
		c     *cohort
		cause error
	}
	var verdicts []verdict
	for range ticker.C {
		now := monotonic()
		d.mu.Lock()
		gap := now - d.beat
		d.beat = now
		d.process += min(gap, int64(watchdogTick))
		if gap > int64(watchdogTick) {
			d.stalled.Add(gap - int64(watchdogTick))
		}
		verdicts = verdicts[:0]
		busy := false
		for _, sh := range d.shards {
			w := &sh.shardWait
			last := w.lastAnswered.Load()
			waiting := false // a call has waited its Timeout with no answer since it was sent
			kept := w.cohorts[:0]
			for _, c := range w.cohorts {
				n := c.calls.Load()
				switch {
				case n == 0 && c != w.current.Load() && c.calls.CompareAndSwap(0, retired):
					c.cancel(nil)
					continue
				case now >= c.wallDue:
					c.calls.Add(retired)
					verdicts = append(verdicts, verdict{c, errMaxWait})
					continue
				}
				if n > 0 && d.process >= c.due && last < c.created {
					waiting = true
				}
				kept = append(kept, c)
			}
			clear(w.cohorts[len(kept):])
			w.cohorts = kept
			switch {
			case w.suspect && last > w.probeSent:
				d.clearSuspect(w)
			case w.suspect && d.process >= w.probeDue:
				for _, c := range w.cohorts {
					c.calls.Add(retired)
					verdicts = append(verdicts, verdict{c, errUnresponsive})
				}
				clear(w.cohorts)
				w.cohorts = w.cohorts[:0]
				d.clearSuspect(w)
			case !w.suspect && waiting:
				d.suspectShard(sh, now)
			}
			busy = busy || len(w.cohorts) > 0 || w.suspect
		}
		if !busy {
			d.running = false
		}
		d.mu.Unlock()
		for _, v := range verdicts {
			v.c.cancel(v.cause)
		}
		if !busy {
			return
		}
	}
}

// suspectShard sends sh a liveness probe; d.mu is held.
func (d *deadlines) suspectShard(sh *shard, now int64) {
	w := &sh.shardWait
	w.suspect, w.probeSent, w.probeDue = true, now, d.process+int64(d.timeout)
	if d.ping == nil || len(d.shards) != 1 {
		// No probe of its own: any answer to a check still clears it.
		w.probeAbort = func() {}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.probeAbort = cancel
	go func() {
		if d.ping(ctx) == nil {
			d.answered(sh)
		}
	}()
}

func (d *deadlines) clearSuspect(w *shardWait) {
	w.probeAbort()
	w.suspect, w.probeAbort = false, nil
}
