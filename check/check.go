// Package check is the one check engine behind every face of Sluice: the HTTP
// check API, the Envoy rate limit service (gRPC and POST /json), the net/http
// middleware and the gateway. A face maps its wire format to a Query and the
// Result back; everything that happens around the store call happens here,
// once, in this order:
//
//  1. the local deny cache: a subject that was denied and cannot have
//     regained quota yet is denied in process, exactly, without a store call;
//  2. load shedding: checks wait for the store in a bounded queue; past
//     MaxInFlight checks waiting (or MaxInFlightPerNamespace of one
//     namespace's), or once a check has waited the guard's
//     MaxWait for its answer (1s by default, on the wall clock), it is
//     shed (ErrOverloaded) instead of queueing without bound; inside those
//     bounds it is answered by the store, late if need be;
//  3. the guard (package guard): a deadline per store call, a circuit breaker
//     and the rule's failure policy (closed, open, local);
//  4. the store;
//  5. shadow mode and metrics: a shadow rule's deny (the store's, or a
//     local failure mode's fallback's) lets the request through, and the
//     Result says so in its Decision, which is the answer every face
//     renders; every decision is counted once, under its source, tenant or
//     domain, and rule (a store deny of a shadow rule as shadow_denied).
//
// One Engine serves one store: it holds that store's breaker, deny cache and
// in-flight count, so every face of a process shares them.
package check

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/usage"
)

// ErrOverloaded is returned for a check refused because this process is past
// its capacity: too many checks already wait for the store, or the store call
// missed its deadline while the store answered later calls (so the store is
// fine and this process is too busy). Faces answer it with HTTP 503 and
// Retry-After, or gRPC RESOURCE_EXHAUSTED; it is never a failure of the
// store and never opens the breaker.
var ErrOverloaded = guard.ErrOverloaded

// Defaults for the zero Options.
const (
	DefaultDenyCacheSize = 100_000
	DefaultMaxInFlight   = 4096
)

// Options configure an Engine. The zero value is ready to use.
type Options struct {
	// Guard configures the store deadline, the circuit breaker and the
	// fallback store of FailLocal. Its Metrics default to Metrics.
	Guard guard.Options
	// Metrics, if set, receives decisions, check durations, deny-cache hits
	// and shed checks.
	Metrics *metrics.Metrics
	// DenyCacheSize bounds the local deny cache (default
	// DefaultDenyCacheSize entries; negative disables it, as for a remote
	// store whose counters can be reset behind this process's back).
	DenyCacheSize int
	// MaxInFlight bounds the checks waiting for the store at once: the
	// queue's length (default DefaultMaxInFlight; negative: no bound). A
	// check past it is shed. The queue's wait is Guard.MaxWait.
	MaxInFlight int
	// MaxInFlightPerNamespace bounds the checks one namespace (a tenant, an
	// Envoy domain) may have waiting at once, so that one namespace's flood
	// cannot fill the queue every namespace shares (default: three quarters
	// of MaxInFlight; negative: no bound of its own). A check past it is
	// shed like one past MaxInFlight.
	MaxInFlightPerNamespace int
	// Clock is the deny cache's clock (default time.Now). Tests that give
	// the store a clock give the engine the same one.
	Clock func() time.Time
	// LeaseHotRate is the checks per second of one (rule, subject) at this
	// instance from which the key is leased, for rules whose limits opt in
	// (see leases.go; default DefaultLeaseHotRate; negative: never lease).
	LeaseHotRate int
	// LeaseTTL is a lease's TTL (default DefaultLeaseTTL); leases are sized
	// to the demand seen over it.
	LeaseTTL time.Duration
	// LeaseCoolAfter is how long a leased key goes without a check before
	// its lease is returned (default 250ms, at most half LeaseTTL). A key
	// checked below LeaseHotRate, measured over about a second, returns
	// its lease too: a key leases only while it is hot.
	LeaseCoolAfter time.Duration
	// MaxLeasedKeys bounds the keys leased at once (default
	// DefaultMaxLeasedKeys); past it hot keys are checked directly.
	MaxLeasedKeys int
	// MaxLeaseUnits caps one lease's want (default DefaultMaxLeaseUnits).
	MaxLeaseUnits int64
	// LeaseHolder names this instance to the store (default: random).
	LeaseHolder string
	// TracerProvider, if set, gives every check a span (see trace.go);
	// nil leaves tracing off and costs the check path nothing.
	TracerProvider trace.TracerProvider
	// Usage, if set, keeps per-minute rollups of every rule's decisions
	// (see package usage); nil costs the check path one nil check.
	Usage *usage.Recorder
}

// Engine decides checks for every face over one store. It is safe for
// concurrent use.
type Engine struct {
	guard       *guard.Guard
	deny        *denyCache
	metrics     *metrics.Metrics
	maxInFlight int64
	inFlight    atomic.Int64
	// maxPerNamespace bounds each namespace's share of the queue, counted
	// in namespaceInFlight (namespace → *atomic.Int64).
	maxPerNamespace   int64
	namespaceInFlight sync.Map
	clock             func() time.Time
	// resetEpoch counts subject resets; a check that saw another epoch when
	// it was sent must not remember its deny (the counters it saw are gone).
	resetEpoch atomic.Uint64
	observer   engineObserver
	tracer     trace.Tracer // nil: tracing off
	usage      *usage.Recorder
	leases     *leasing
}

// New returns an Engine over store. Close releases its fallback store.
func New(store sluice.Store, opts Options) *Engine {
	if opts.Guard.Metrics == nil {
		opts.Guard.Metrics = opts.Metrics
	}
	size := opts.DenyCacheSize
	switch {
	case size == 0:
		size = DefaultDenyCacheSize
	case size < 0:
		size = 0
	}
	maxInFlight := int64(opts.MaxInFlight)
	switch {
	case maxInFlight == 0:
		maxInFlight = DefaultMaxInFlight
	case maxInFlight < 0:
		maxInFlight = 1<<63 - 1
	}
	perNamespace := int64(opts.MaxInFlightPerNamespace)
	switch {
	case perNamespace == 0:
		perNamespace = max(1, maxInFlight-maxInFlight/4)
	case perNamespace < 0:
		perNamespace = 1<<63 - 1
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	g := guard.New(store, opts.Guard)
	return &Engine{
		clock:           opts.Clock,
		guard:           g,
		deny:            newDenyCache(size),
		metrics:         opts.Metrics,
		maxInFlight:     maxInFlight,
		maxPerNamespace: perNamespace,
		tracer:          newTracer(opts.TracerProvider),
		usage:           opts.Usage,
		leases:          newLeasing(opts, g.Leases()),
	}
}

// Close releases the Engine's fallback store, if one was made. It does not
// close the store, which the caller owns.
// Held quota leases are returned first.
func (e *Engine) Close() error {
	e.closeLeases()
	return e.guard.Close()
}

// BreakerState returns the store breaker's state: "closed", "open" or
// "half-open".
func (e *Engine) BreakerState() string { return e.guard.State() }

// Rule is a rule as the engine checks it. Faces build one per rule of their
// configuration with NewRule and keep it while the rule is unchanged: its
// identity is what the deny cache trusts, so a changed rule must be a new
// *Rule (its old denies then no longer apply).
type Rule struct {
	// Namespace and Name key the counters (sluice.Request's Tenant and
	// Rule).
	Namespace string
	Name      string
	Limits    []sluice.Limit
	// Plans are named limit sets a check may choose with Query.Plan, and
	// Overrides give matching subjects other limits (exact over longest
	// prefix, expired ones skipped at check time); see sluice.ResolveLimits.
	// A change to either is a new *Rule, like any rule change.
	Plans     sluice.Plans
	Overrides *sluice.OverrideMatcher
	// Mode is the failure policy; "" fails closed.
	Mode sluice.FailureMode
	// Shadow rules are checked and counted but never deny.
	Shadow bool

	series *metrics.Series
	labels metrics.Labels // for spans
	// inFlight counts the checks of the rule's namespace waiting for the
	// store (shared by the namespace's rules; nil: looked up per check).
	inFlight *atomic.Int64
	usage    *usage.Counters // nil: no rollups
	// leases: the rule's checks may be served from quota leases (every
	// limit opted in); leaseSalt spreads its keys in the hotness table.
	leases    bool
	leaseSalt uint64
}

// NewRule returns r ready to check, counted under labels.
func (e *Engine) NewRule(labels metrics.Labels, r Rule) *Rule {
	if r.Mode == "" {
		r.Mode = sluice.FailClosed
	}
	r.series = e.metrics.Series(labels)
	r.labels = labels
	r.inFlight = e.namespaceCount(r.Namespace)
	r.usage = e.usage.Counters(r.Namespace, r.Name)
	r.leases = e.leases.on && ruleLeases(r.Limits)
	r.leaseSalt = maphash.String(e.leases.seed, r.Namespace+"\x00"+r.Name)
	return &r
}

// Scope counts the checks of one tenant or domain that matched no rule.
type Scope struct{ series *metrics.Series }

// NewScope returns the Scope of labels (whose Rule is ignored).
func (e *Engine) NewScope(labels metrics.Labels) *Scope {
	labels.Rule = ""
	return &Scope{series: e.metrics.Series(labels)}
}

// NoRule counts a check that matched no rule: allowed without a store call,
// since limiting is opt-in. start is when the face received the check.
func (s *Scope) NoRule(start time.Time) {
	if s == nil {
		return
	}
	s.series.Count(metrics.ResultNoRule)
	s.series.ObserveCheck(time.Since(start))
}

// Query is one check as a face asks it.
type Query struct {
	Rule    *Rule
	Subject string
	Cost    int64
	// Limits, when set, replace Rule.Limits for this check (an Envoy
	// all-or-nothing request checks the limits of all its descriptors at
	// once, each under a name of its own). The deny cache then keys by
	// CacheSubject, which must determine Limits given Rule.
	Limits       []sluice.Limit
	CacheSubject string
	// Plan names one of Rule.Plans ("": the rule's own limits); an unknown
	// plan is sluice.ErrInvalid naming the plans there are.
	Plan string
	// Reserve makes Cost an estimate to settle later, and HoldTTL, when
	// set, is the TTL of the hold the check takes (see holds.go).
	Reserve bool
	HoldTTL time.Duration
	// Start is when the face received the check (default: when Check is
	// called); check durations are counted from it.
	Start time.Time
	// Now, when set, is the time the store decides at; tests only (they
	// give the Engine the same Clock).
	Now time.Time
}

// Outcome is how a check ended, as counted in sluice_decisions_total.
type Outcome uint8

const (
	// Allowed: the store allowed the check.
	Allowed Outcome = iota
	// Denied: the check is over a limit; the face answers 429 or OVER_LIMIT.
	Denied
	// ShadowDenied: over a limit of a shadow rule, so let through.
	ShadowDenied
	// Degraded: the store could not answer and the failure policy decided
	// (Decision.Allowed says how).
	Degraded
)

// Result is the engine's answer to a Query: the answer the client sees, so
// a face renders it as it is and decides nothing.
type Result struct {
	// Decision is that answer. Its Allowed is final: the store's verdict,
	// or the failure policy's (Degraded), and a shadow rule's deny already
	// turned into an allow, whether the store or the fallback of a local
	// failure mode denied. Its figures are what was decided: for a
	// shadowed deny they still say what would have been denied (Shadowed
	// is set), so a face that shows them does; headers built from Decision
	// ask nobody to wait.
	Decision sluice.Decision
	Outcome  Outcome
	// Shadowed: a shadow rule let through what its limits, or its failure
	// policy's fallback, denied.
	Shadowed bool
	// Cached says the deny came from the deny cache, without a store call.
	Cached bool
	// Plan and Override name the plan and the override whose limits were
	// checked, "" for none.
	Plan     string
	Override string
}

// Pass reports whether the request may go on: Decision.Allowed.
func (r Result) Pass() bool { return r.Decision.Allowed }

// Check decides q. Errors: sluice.ErrInvalid for input that can never be
// valid (a cost no limit can hold), ErrOverloaded when the check is shed,
// sluice.ErrStoreUnavailable when the store cannot answer and the rule fails
// closed, and the caller's own context error when it gave up.
func (e *Engine) Check(ctx context.Context, q Query) (Result, error) {
	res, err := e.decide(ctx, q)
	if err == nil && q.Rule.usage != nil {
		switch res.Outcome {
		case Allowed:
			q.Rule.usage.Add(usage.Units, q.Cost)
			if q.Subject != "" {
				q.Rule.usage.Subject(q.Subject, false, q.Cost)
			}
		case Denied:
			if q.Subject != "" {
				q.Rule.usage.Subject(q.Subject, true, 0)
			}
		}
	}
	if o := e.observer.fn.Load(); o != nil && err == nil && q.Rule.series != nil {
		(*o)(q.Rule.series.Labels(), q.Subject, res.Outcome)
	}
	return res, err
}

// decide is Check without the observer.
func (e *Engine) decide(ctx context.Context, q Query) (Result, error) {
	if e.tracer != nil {
		return e.tracedCheck(ctx, q)
	}
	return e.check(ctx, q, nil)
}

// check decides q; tr, when tracing, records the store call's time.
func (e *Engine) check(ctx context.Context, q Query, tr *checkTrace) (Result, error) {
	if q.Start.IsZero() {
		q.Start = time.Now()
	}
	r := q.Rule
	limits := q.Limits
	var resolved *sluice.Resolution
	if limits == nil {
		limits = r.Limits
		if q.Plan != "" || r.Overrides != nil || len(r.Plans) > 0 {
			now := q.Now
			if now.IsZero() {
				now = e.clock()
			}
			rs, err := sluice.ResolveLimits(r.Limits, r.Plans, q.Plan, r.Overrides, q.Subject, now)
			if err != nil {
				return e.fail(r, q.Start, metrics.ResultError, err)
			}
			resolved, limits = &rs, rs.Limits
		}
	}
	req := sluice.Request{Tenant: r.Namespace, Rule: r.Name, Subject: q.Subject, Limits: limits, Cost: q.Cost, Now: q.Now,
		Reserve: q.Reserve, HoldTTL: q.HoldTTL}
	if q.Cost < 0 || q.Cost > 0 && exceedsCapacity(limits, q.Cost) || q.HoldTTL != 0 {
		if err := req.Validate(); err != nil {
			return e.fail(r, q.Start, metrics.ResultError, err)
		}
	}

	cacheSubject := q.Subject
	if q.Limits != nil {
		cacheSubject = q.CacheSubject
	}
	var want []sluice.Limit
	if resolved != nil {
		want = limits
	}
	if d, ok := e.deny.lookupFor(r, cacheSubject, q.Cost, e.clock(), want); ok {
		e.metrics.DenyCacheHit()
		return e.named(e.finish(r, q.Start, Result{Decision: d, Cached: true}), resolved), nil
	}

	// A hot key of a leasing rule: from the units in hand, in process. Not
	// for a rule with plans or overrides: a lease is of one limit set, and
	// a subject's set can change between its checks (another plan named,
	// an override applied or expired).
	var lease *leaseEntry
	if r.leases && resolved == nil && q.Limits == nil && !q.Reserve && q.Cost > 0 {
		if lease = e.leases.hot(e, r, q.Subject, e.clock()); lease != nil {
			lease.mu.Lock()
			d, ok := lease.take(q.Cost, e.clock())
			lease.mu.Unlock()
			if ok {
				e.metrics.QuotaLeaseSaved()
				return e.finish(r, q.Start, Result{Decision: d}), nil
			}
		}
	}

	nsInFlight := r.inFlight
	if nsInFlight == nil {
		nsInFlight = e.namespaceCount(r.Namespace)
	}
	if n := e.inFlight.Add(1); n > e.maxInFlight {
		e.inFlight.Add(-1)
		return e.shed(ctx, r, q, req)
	}
	if n := nsInFlight.Add(1); n > e.maxPerNamespace {
		nsInFlight.Add(-1)
		e.inFlight.Add(-1)
		return e.shed(ctx, r, q, req)
	}
	e.metrics.AddInFlight(1)
	epoch := e.resetEpoch.Load()
	admits := e.deny.mark(r, q.Subject, limits)
	sentAt := e.clock()
	storeStart := tr.start()
	var d sluice.Decision
	var err error
	leased := false
	if lease != nil {
		d, leased, err = e.leaseCheck(ctx, lease, q, limits)
	}
	if !leased && err == nil {
		d, err = e.guard.Check(ctx, req, r.Mode)
	}
	tr.stored(storeStart)
	nsInFlight.Add(-1)
	e.inFlight.Add(-1)
	e.metrics.AddInFlight(-1)
	if err != nil {
		if errors.Is(err, ErrOverloaded) {
			return e.shed(ctx, r, q, req)
		}
		return e.fail(r, q.Start, metrics.ResultError, err)
	}
	if !d.Allowed && !d.Degraded && e.resetEpoch.Load() == epoch && !concurrencyDenied(d) {
		var maxAge time.Duration
		if r.leases {
			// Other instances give leased units back early (their
			// key cooled, or a renew returned what was left), which
			// the store's retry_after does not count: ask again soon.
			maxAge = e.leases.denyFor
		}
		e.deny.remember(r, cacheSubject, q.Subject, limits, q.Cost, sentAt, admits, d, maxAge)
	} else if d.Allowed && q.Cost > 0 {
		// The counters moved without time passing: a deny remembered
		// meanwhile no longer has the store's figures.
		e.deny.admitted(r, q.Subject, limits)
		e.deny.forget(r.Namespace, r.Name, cacheSubject)
	}
	e.countLeases(r, req, d)
	return e.named(e.finish(r, q.Start, Result{Decision: d}), resolved), nil
}

// named sets the plan and override of res from what resolution chose.
func (e *Engine) named(res Result, rs *sluice.Resolution) Result {
	if rs != nil {
		res.Plan, res.Override = rs.Plan, rs.Override
	}
	return res
}

// namespaceCount returns the count of namespace's checks waiting for the
// store. Namespaces are the catalog's tenants and the configured Envoy
// domains, so the map is as bounded as they are.
func (e *Engine) namespaceCount(namespace string) *atomic.Int64 {
	if c, ok := e.namespaceInFlight.Load(namespace); ok {
		return c.(*atomic.Int64)
	}
	c, _ := e.namespaceInFlight.LoadOrStore(namespace, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// exceedsCapacity reports whether cost can never fit one of limits.
func exceedsCapacity(limits []sluice.Limit, cost int64) bool {
	for i := range limits {
		if cost > limits[i].MaxCost() {
			return true
		}
	}
	return false
}

// shed answers a check this process has no capacity for. A rule that fails
// open or local says what to do when the limiter cannot decide, and that
// applies here too; a rule that fails closed is refused with ErrOverloaded.
func (e *Engine) shed(ctx context.Context, r *Rule, q Query, req sluice.Request) (Result, error) {
	e.metrics.Shed()
	switch r.Mode {
	case sluice.FailOpen:
		return e.finish(r, q.Start, Result{Decision: sluice.Decision{Allowed: true, Degraded: true}}), nil
	case sluice.FailLocal:
		d, err := e.guard.CheckLocal(ctx, req)
		if err != nil {
			return e.fail(r, q.Start, metrics.ResultError, err)
		}
		return e.finish(r, q.Start, Result{Decision: d}), nil
	}
	return e.fail(r, q.Start, metrics.ResultShed, ErrOverloaded)
}

func (e *Engine) fail(r *Rule, start time.Time, result string, err error) (Result, error) {
	r.series.Count(result)
	r.series.ObserveCheck(time.Since(start))
	if result == metrics.ResultShed {
		r.usage.Add(usage.Shed, 1)
	}
	return Result{}, err
}

// finish classifies and counts a decision, and makes it the answer: a shadow
// rule never denies, however the decision was taken.
func (e *Engine) finish(r *Rule, start time.Time, res Result) Result {
	d := res.Decision
	var result string
	switch {
	case d.Degraded:
		res.Outcome, result = Degraded, metrics.ResultDegraded
		r.usage.Add(usage.Degraded, 1)
	case d.Allowed:
		res.Outcome, result = Allowed, metrics.ResultAllowed
		r.usage.Add(usage.Allowed, 1)
	case r.Shadow:
		res.Outcome, result = ShadowDenied, metrics.ResultShadowDenied
		r.usage.Add(usage.ShadowDenied, 1)
	default:
		res.Outcome, result = Denied, metrics.ResultDenied
		r.usage.Add(usage.Denied, 1)
	}
	if !d.Allowed && r.Shadow {
		res.Decision.Allowed, res.Shadowed = true, true
	}
	r.series.Count(result)
	r.series.ObserveCheck(time.Since(start))
	return res
}

// Reset forgets subject's counters under r, in the store, in the fallback
// store and in the deny cache.
func (e *Engine) Reset(ctx context.Context, r *Rule, subject string) error {
	e.ForgetSubject(r.Namespace, r.Name, subject)
	err := e.guard.Reset(ctx, r.Namespace, r.Name, subject, r.Limits)
	// A check sent before the reset may have put back a deny it saw
	// before it: forget again once the store has forgotten.
	e.ForgetSubject(r.Namespace, r.Name, subject)
	return err
}

// ForgetSubject drops the deny-cache entry of a subject whose counters were
// reset (by this process or, through the catalog's change feed, another).
// The epoch moves first, so a check in flight across the reset cannot put
// back what it saw before.
func (e *Engine) ForgetSubject(namespace, rule, subject string) {
	e.resetEpoch.Add(1)
	e.deny.forget(namespace, rule, subject)
	e.dropLeases(func(le *leaseEntry) bool {
		return le.rule.Namespace == namespace && le.rule.Name == rule && le.subject == subject
	})
}

// ForgetRule drops the deny-cache entries of a rule, or of every rule of a
// namespace when rule is "" (a deleted rule or tenant: entries of a changed
// rule are dropped by its new identity anyway).
// Their quota leases are returned.
func (e *Engine) ForgetRule(namespace, rule string) {
	e.deny.forgetRule(namespace, rule)
	e.dropLeases(func(le *leaseEntry) bool {
		return le.rule.Namespace == namespace && (rule == "" || le.rule.Name == rule)
	})
}

// DenyCacheLen returns the number of entries in the deny cache.
func (e *Engine) DenyCacheLen() int { return e.deny.len() }

// Decided counts a decision a face took without the store (an Envoy rule
// that is unlimited, or admits nothing, or a cost no limit can hold, which
// Envoy's API answers as a deny), classified like any other.
func (e *Engine) Decided(r *Rule, start time.Time, d sluice.Decision) Result {
	return e.finish(r, start, Result{Decision: d})
}

// Refused counts a check a face refused as bad input before asking the
// engine (such as a request without the key it is counted under).
func (e *Engine) Refused(r *Rule, start time.Time) {
	r.series.Count(metrics.ResultError)
	r.series.ObserveCheck(time.Since(start))
}
