// Package guard protects callers from a slow or dead rate-limit store.
//
// A Guard wraps a sluice.Store. A store call waits for the store's answer,
// late if need be, while the store shows it is alive: a call that has waited
// Options.Timeout (50ms by default) with no answer from its store makes the
// store suspect and sends it a liveness probe (PING), and a store that then
// answers nothing for another Timeout is unresponsive, failing every call
// pending on it; so a hung Redis costs a request at most two Timeouts. Both
// count this process's running time, not the wall's (see deadline.go): a
// process that is frozen, throttled or starved of CPU does not blame the
// store for it. Options.MaxWait (1s by default) bounds the wait on the wall
// clock, past which the call is this process's overload (ErrOverloaded).
// Calls go through a circuit breaker: after FailureThreshold consecutive
// failures the breaker opens and checks stop touching the store at all,
// answering from the failure policy at once; after OpenTimeout one probe call
// is let through, and its success closes the breaker again.
//
// Recovery is bounded by construction: once the store answers again, a
// probe is let through within OpenTimeout, or, if one was in flight when the
// store healed, within the two Timeouts that probe may take to fail plus
// OpenTimeout. With the defaults (50ms, 200ms) that is 300ms plus the
// probe's own answer: checks are the store's again well within a second of
// any heal, whatever the breaker's phase. The open period does not back
// off: a dead store costs one probe call per OpenTimeout per shard and
// instance, and a longer period would lengthen every recovery.
//
// When the store cannot answer, the sluice.FailureMode of the check decides:
//
//   - FailClosed: an error wrapping sluice.ErrStoreUnavailable (the service
//     answers 503);
//   - FailOpen: Decision{Allowed: true, Degraded: true};
//   - FailLocal: the decision of an in-process store, marked Degraded, so each
//     instance still enforces the limits on its own share of the traffic.
//
// Three kinds of error are not store failures and never count towards opening
// the breaker: input errors (sluice.ErrInvalid), which are returned as they
// are; the caller's own context being cancelled or past its deadline, which
// is returned to the caller without applying any failure policy; and a call
// that waited MaxWait on the wall clock, which says this process, not the
// store, is too busy to read answers in time: that returns ErrOverloaded (see
// there).
package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// ErrBreakerOpen is wrapped (together with sluice.ErrStoreUnavailable) by the
// error of a fail-closed check answered without calling the store because the
// circuit breaker is open.
var ErrBreakerOpen = errors.New("circuit breaker open after repeated store failures; the store is not being called")

// ErrOverloaded is returned for a store call that waited past MaxWait on
// the wall clock while its store was not unresponsive (it answered others, or
// this process could not run to judge it): this process is past its capacity
// (out of CPU, say). It never opens the breaker, and no failure policy is
// applied: the caller sheds the check.
var ErrOverloaded = errors.New("this instance is past its capacity")

// Defaults for the zero Options.
const (
	DefaultTimeout          = 50 * time.Millisecond
	DefaultMaxWait          = time.Second
	DefaultFailureThreshold = 5
	DefaultOpenTimeout      = 200 * time.Millisecond
	DefaultName             = "store"
)

// Options configure a Guard. The zero value is ready to use.
type Options struct {
	// Name names the breaker in OnStateChange and in the sluice_breaker_state
	// metric (default "store").
	Name string
	// Timeout (default 50ms) is how long a call waits with no answer from
	// its store before the store is sent a liveness probe, and how long the
	// store then has to answer anything before it is unresponsive and its
	// pending calls fail. Both count this process's running time: time the
	// process could not run (frozen, throttled, starved of CPU) does not.
	Timeout time.Duration
	// MaxWait bounds each store call on the wall clock (default 1s, at
	// least twice Timeout): a call still unanswered then is this process past its
	// capacity, and returns ErrOverloaded.
	MaxWait time.Duration
	// Local is the store used by FailLocal checks while the primary store is
	// unavailable. Default: an in-process memory store, created on first use
	// and closed by Close.
	Local sluice.Store
	// FailureThreshold is the number of consecutive store failures that opens
	// the breaker (default 5).
	FailureThreshold int
	// OpenTimeout is how long the breaker stays open before letting one probe
	// call through (default 200ms: see the package doc for the recovery
	// bound it gives).
	OpenTimeout time.Duration
	// OnStateChange, if set, is called when the breaker changes state, with
	// states "closed", "open" or "half-open". It runs while the breaker is
	// locked: it must be quick and must not call back into the Guard.
	OnStateChange func(name, from, to string)
	// Metrics, if set, records store call durations and errors and the
	// breaker state.
	Metrics *metrics.Metrics
}

// Guard is a sluice store wrapper with a per-call deadline, a circuit breaker
// and a failure policy. It is safe for concurrent use.
type Guard struct {
	primary sluice.Store
	timeout time.Duration
	maxWait time.Duration
	metrics *metrics.Metrics
	// shards are the breakers of the store's independent parts: one for a
	// single server, one per master node of a Redis Cluster (see Sharded),
	// so that one dead node fails only the checks whose keys live there.
	shards  []shard
	sharded Sharded

	// deadlines keeps this process's clock and expires the store calls'
	// contexts on it (see deadline.go).
	deadlines *deadlines

	localOnce sync.Once
	local     sluice.Store
	ownLocal  *memory.Store // the default Local store, closed by Close
}

// Sharded is a store whose keys live on independent servers, such as a
// Redis Cluster: the guard keeps a breaker per shard.
type Sharded interface {
	// Shards is the number of shards, at least 1.
	Shards() int
	// Shard is the shard, in [0, Shards()), holding the counters of a
	// subject of (tenant, rule).
	Shard(tenant, rule, subject string) int
}

// shard is the breaker of one part of the store.
type shard struct {
	breaker *gobreaker.CircuitBreaker[sluice.Decision]
	// shardWait is what the deadlines keep of the shard: its calls'
	// cohorts, when it last answered, whether it is suspect.
	shardWait
}

// New returns a Guard over primary.
func New(primary sluice.Store, opts Options) *Guard {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	// A hung store is judged within two Timeouts: a shorter wait would shed
	// its checks as overload instead.
	opts.MaxWait = max(opts.MaxWait, 2*opts.Timeout)
	if opts.FailureThreshold <= 0 {
		opts.FailureThreshold = DefaultFailureThreshold
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	g := &Guard{primary: primary, timeout: opts.Timeout, maxWait: opts.MaxWait, metrics: opts.Metrics, local: opts.Local}
	n := 1
	if sh, ok := primary.(Sharded); ok && sh.Shards() > 1 {
		g.sharded, n = sh, sh.Shards()
	}
	threshold := uint32(opts.FailureThreshold)
	onChange := opts.OnStateChange
	g.shards = make([]shard, n)
	for i := range g.shards {
		name := opts.Name
		if n > 1 {
			name = fmt.Sprintf("%s/%d", opts.Name, i)
		}
		g.shards[i].breaker = gobreaker.NewCircuitBreaker[sluice.Decision](gobreaker.Settings{
			Name:        name,
			MaxRequests: 1, // one probe at a time while half-open
			Timeout:     opts.OpenTimeout,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
			IsExcluded:  notStoreFailure,
			OnStateChange: func(name string, from, to gobreaker.State) {
				g.metrics.SetBreakerState(name, to.String())
				if onChange != nil {
					onChange(name, from.String(), to.String())
				}
			},
		})
		g.metrics.SetBreakerState(name, metrics.BreakerClosed)
	}
	g.deadlines = &deadlines{timeout: opts.Timeout, maxWait: opts.MaxWait}
	for i := range g.shards {
		g.deadlines.shards = append(g.deadlines.shards, &g.shards[i])
	}
	if p, ok := primary.(pinger); ok {
		g.deadlines.ping = p.Ping
	}
	return g
}

// shardOf returns the breaker of a subject of (tenant, rule).
func (g *Guard) shardOf(tenant, rule, subject string) *shard {
	if g.sharded == nil {
		return &g.shards[0]
	}
	i := g.sharded.Shard(tenant, rule, subject)
	if i < 0 || i >= len(g.shards) {
		i = 0
	}
	return &g.shards[i]
}

// Check decides req on the primary store within the deadline, or, when the
// store fails or the breaker is open, by mode (see the package doc). An
// unknown or empty mode fails closed.
func (g *Guard) Check(ctx context.Context, req sluice.Request, mode sluice.FailureMode) (sluice.Decision, error) {
	sh := g.shardOf(req.Tenant, req.Rule, req.Subject)
	d, err := sh.breaker.Execute(func() (sluice.Decision, error) {
		return g.checkPrimary(ctx, sh, req)
	})
	if err == nil {
		return d, nil
	}
	if errors.Is(err, sluice.ErrInvalid) {
		return sluice.Decision{}, err
	}
	var gone *callerGone
	if errors.As(err, &gone) {
		return sluice.Decision{}, gone.err
	}
	if errors.Is(err, ErrOverloaded) {
		return sluice.Decision{}, err
	}
	return g.fallback(ctx, req, mode, err)
}

func (g *Guard) checkPrimary(ctx context.Context, sh *shard, req sluice.Request) (sluice.Decision, error) {
	start := time.Now()
	callCtx, c := g.callContext(ctx, sh, start)
	d, err := g.primary.Check(callCtx, req)
	c.leave()
	return d, g.judge(ctx, c.ctx, sh, start, err)
}

// pinger is a store with a liveness probe of its own.
type pinger interface {
	Ping(ctx context.Context) error
}

// judge classifies the outcome of a store call started at start under the
// call context deadline: nil, an input error, the caller gone, this process
// overloaded, or a store failure (the only kind the breaker counts).
func (g *Guard) judge(ctx, deadline context.Context, sh *shard, start time.Time, err error) error {
	if err == nil {
		g.deadlines.answered(sh)
		g.metrics.ObserveStore(time.Since(start), nil)
		return nil
	}
	if errors.Is(err, sluice.ErrInvalid) {
		return err
	}
	if ctx.Err() != nil {
		return &callerGone{err: ctx.Err()}
	}
	if deadline.Err() != nil {
		switch context.Cause(deadline) {
		case errMaxWait:
			return &overloaded{cause: fmt.Errorf("no answer after waiting %v while the store went on answering or this process could not run", g.maxWait)}
		case errUnresponsive:
			err = fmt.Errorf("the store answered nothing, not even a liveness probe, for %v of this process's running time", 2*g.timeout)
		}
	}
	g.metrics.ObserveStore(time.Since(start), err)
	return err
}

// clockBase anchors monotonic: durations since it use the monotonic clock.
var clockBase = time.Now()

func monotonic() int64 { return int64(time.Since(clockBase)) }

// callContext returns the context of a store call to sh started at start:
// ctx's values (a store may read the check's own, as the remote
// middleware's store reads its route), with the shared context of start's cohort (see deadline.go),
// which is also returned so the call can leave it and be judged by its
// cause. The caller's own cancellation is not passed on (the call ends when
// the store answers, is judged unresponsive, or the maximum wait passes, and
// is then told apart by ctx.Err()); in exchange no timer is created per
// call.
func (g *Guard) callContext(ctx context.Context, sh *shard, start time.Time) (context.Context, *cohort) {
	c := g.deadlines.join(sh, int64(start.Sub(clockBase)))
	if isBackground(ctx) {
		return c.ctx, c
	}
	return &callContext{Context: c.ctx, values: ctx}, c
}

// isBackground reports whether ctx carries nothing a store could read.
func isBackground(ctx context.Context) bool {
	return ctx == context.Background() || ctx == context.TODO()
}

// callContext carries the caller's values with the shared deadline.
type callContext struct {
	context.Context
	values context.Context
}

func (c *callContext) Value(key any) any { return c.values.Value(key) }

// overloaded marks a store call that missed its deadline while the store
// answered later ones.
type overloaded struct{ cause error }

func (e *overloaded) Error() string { return ErrOverloaded.Error() + ": " + e.cause.Error() }
func (e *overloaded) Unwrap() error { return ErrOverloaded }

// fallback answers req by mode after the store failed with cause.
func (g *Guard) fallback(ctx context.Context, req sluice.Request, mode sluice.FailureMode, cause error) (sluice.Decision, error) {
	// The store never saw an invalid request it could reject: reject it here,
	// so a store outage cannot turn bad input into an allow. A request without
	// limits is one for a remote service, which holds the limits itself.
	if len(req.Limits) > 0 || mode == sluice.FailLocal {
		if err := req.Validate(); err != nil {
			return sluice.Decision{}, err
		}
	}
	switch mode {
	case sluice.FailOpen:
		return sluice.Decision{Allowed: true, Degraded: true}, nil
	case sluice.FailLocal:
		if hasCredits(req.Limits) {
			// A balance lives in the shared store only: the local store
			// would start every subject at a fresh balance and spend
			// credits that were never there. Such a check fails closed.
			return sluice.Decision{}, unavailable(errors.Join(errCreditsNotLocal, cause))
		}
		d, err := g.localStore().Check(ctx, req)
		if err != nil {
			return sluice.Decision{}, err
		}
		d.Degraded = true
		return d, nil
	}
	return sluice.Decision{}, unavailable(cause)
}

// Stalled returns the wall time this process was found unable to run while
// store calls were pending: what the deadlines did not count.
func (g *Guard) Stalled() time.Duration { return time.Duration(g.deadlines.stalled.Load()) }

// CheckLocal decides req on the fallback store alone, marked Degraded: what
// FailLocal answers when the primary store cannot be asked.
func (g *Guard) CheckLocal(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	return g.fallback(ctx, req, sluice.FailLocal, nil)
}

func (g *Guard) localStore() sluice.Store {
	g.localOnce.Do(func() {
		if g.local == nil {
			g.ownLocal = memory.New(memory.Options{})
			g.local = g.ownLocal
		}
	})
	return g.local
}

// Reset forgets the subject's counters on the fallback store and on the
// primary store, the latter within the deadline and through the breaker:
// while the breaker is open it fails at once with an error wrapping
// sluice.ErrStoreUnavailable.
func (g *Guard) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	// The fallback store holds what the subject used during an outage:
	// forget that too, or a reset would not reset a fail-local rule.
	if err := g.localStore().Reset(ctx, tenant, rule, subject, limits); err != nil && errors.Is(err, sluice.ErrInvalid) {
		return err
	}
	_, err := storeCall(g, ctx, g.shardOf(tenant, rule, subject), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.primary.Reset(ctx, tenant, rule, subject, limits)
	})
	return changeError(err)
}

// State returns the breakers' state: "closed", "open" or "half-open" when
// every shard's breaker is in that state (a single server has one), else
// "partial": some shards of the store are failing.
func (g *Guard) State() string {
	state := g.shards[0].breaker.State()
	for i := range g.shards[1:] {
		if g.shards[i+1].breaker.State() != state {
			return StatePartial
		}
	}
	return state.String()
}

// StatePartial is the State of a sharded store whose shards' breakers are
// not all in the same state.
const StatePartial = "partial"

// Close releases the default Local store, if one was created. It does not
// close the primary store, which the caller owns.
func (g *Guard) Close() error {
	g.localOnce.Do(func() {}) // no local store may be created after Close
	if g.ownLocal != nil {
		return g.ownLocal.Close()
	}
	return nil
}

// callerGone marks a store call abandoned because the caller's own context
// ended: not the store's fault.
type callerGone struct{ err error }

func (e *callerGone) Error() string { return e.err.Error() }
func (e *callerGone) Unwrap() error { return e.err }

func notStoreFailure(err error) bool {
	if err == nil {
		return false
	}
	var gone *callerGone
	// A memory store refusing a tenant past its budget is answering, for
	// that tenant only: the other tenants must not lose the store for it.
	return errors.Is(err, sluice.ErrInvalid) || errors.As(err, &gone) || errors.Is(err, ErrOverloaded) ||
		errors.Is(err, memory.ErrBudgetExhausted)
}

func unavailable(cause error) error {
	switch {
	case errors.Is(cause, gobreaker.ErrOpenState), errors.Is(cause, gobreaker.ErrTooManyRequests):
		return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, ErrBreakerOpen)
	case errors.Is(cause, sluice.ErrStoreUnavailable):
		return cause
	}
	// %v, not %w: a store timeout must not look like the caller's own
	// context.DeadlineExceeded to errors.Is.
	return fmt.Errorf("%w: %v", sluice.ErrStoreUnavailable, cause)
}

// errCreditsNotLocal says why a check with a credits limit does not fall
// back to the local store.
var errCreditsNotLocal = errors.New("a credits balance is kept in the shared store only, so a check with a credits limit fails closed rather than local")

func hasCredits(limits []sluice.Limit) bool {
	for _, l := range limits {
		if l.Algorithm == sluice.AlgorithmCredits {
			return true
		}
	}
	return false
}
