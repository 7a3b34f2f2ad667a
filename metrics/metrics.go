// Package metrics holds the Prometheus collectors shared by every face of
// Sluice: the HTTP check service, the Envoy rate-limit server, the gateway and
// the middleware. They all report into one family of metrics so a dashboard
// reads the same whichever face answered.
//
// No metric is labelled by subject, key, API key or client IP: those are
// unbounded and would explode the series count (and some are secrets). A
// decision is labelled by its source, its scope (the tenant of the HTTP
// service, or the Envoy domain), the rule name and the result. The number of
// (source, scope, rule) series is capped (Options.MaxRuleSeries): past the
// cap, new rules are counted under tenant, domain and rule "_overflow", so a
// tenant creating rules without end cannot grow the metrics without end.
// Series of deleted rules are removed (DropRule).
package metrics

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Sources: which face of Sluice answered a check.
const (
	SourceHTTP       = "http"
	SourceEnvoy      = "envoy"
	SourceGateway    = "gateway"
	SourceMiddleware = "middleware"
)

// Results of a check, as counted in sluice_decisions_total.
const (
	ResultAllowed      = "allowed"
	ResultDenied       = "denied"
	ResultDegraded     = "degraded"
	ResultShadowDenied = "shadow_denied"
	ResultNoRule       = "no_rule"
	ResultError        = "error"
	// ResultShed is a check refused because the process was past its
	// capacity (HTTP 503 "overloaded", gRPC RESOURCE_EXHAUSTED).
	ResultShed = "shed"
)

// Overflow is the tenant, domain and rule label of the series of every rule
// created past Options.MaxRuleSeries.
const Overflow = "_overflow"

// DefaultMaxRuleSeries is the default cap on (source, scope, rule) series.
const DefaultMaxRuleSeries = 10_000

// Breaker states, as the guard names them; the gauge encodes them as 0, 1, 2.
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half-open"
	BreakerOpen     = "open"
)

// checkBuckets start at 50µs: a memory-store check takes microseconds, a Redis
// round trip a fraction of a millisecond, and a timed-out store call tens of
// milliseconds.
var checkBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}

// Metrics is the set of collectors. A nil *Metrics is valid and records
// nothing, so components can take metrics as an optional dependency.
type Metrics struct {
	maxRuleSeries int
	mu            sync.Mutex
	series        map[Labels]*Series
	// regular counts the entries of series that are not an overflow one.
	regular int

	decisions     *prometheus.CounterVec
	checkDuration *prometheus.HistogramVec
	storeDuration prometheus.Histogram
	storeErrors   prometheus.Counter
	breakerState  *prometheus.GaugeVec
	denyCacheHits prometheus.Counter
	shed          prometheus.Counter
	inFlight      prometheus.Gauge
	budgetRefused prometheus.Counter
	watchErrors   prometheus.Counter
	holds         holdMetrics
	quotaLeases   quotaLeaseMetrics
	envoyLoads    envoyLoadMetrics
	// reg is where collectors made later (SnapshotAge) are registered.
	reg prometheus.Registerer
}

// Options configure Metrics; the zero value uses the defaults.
type Options struct {
	// MaxRuleSeries caps the distinct (source, tenant, domain, rule) label
	// sets of the decision counters (default DefaultMaxRuleSeries).
	MaxRuleSeries int
}

// New creates the collectors and registers them with reg. Tests pass their
// own prometheus.NewRegistry(); a process passes prometheus.DefaultRegisterer.
// Several components of one process may call New with the same registerer:
// they then share the already registered collectors instead of failing. A nil
// reg creates unregistered collectors.
func New(reg prometheus.Registerer) *Metrics { return NewWithOptions(reg, Options{}) }

// NewWithOptions is New with options.
func NewWithOptions(reg prometheus.Registerer, opts Options) *Metrics {
	if opts.MaxRuleSeries <= 0 {
		opts.MaxRuleSeries = DefaultMaxRuleSeries
	}
	m := &Metrics{
		maxRuleSeries: opts.MaxRuleSeries,
		series:        map[Labels]*Series{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions, by source (http, envoy, gateway, middleware), tenant (HTTP service), domain (Envoy), rule and result (allowed, denied, degraded, shadow_denied, shed, no_rule, error).",
		}, []string{"source", "tenant", "domain", "rule", "result"}),
		checkDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to answer a rate-limit check, by source, including the store call.",
			Buckets: checkBuckets,
		}, []string{"source"}),
		storeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_store_duration_seconds",
			Help:    "Time of one call to the rate-limit store (successful or not).",
			Buckets: checkBuckets,
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that failed or timed out (input errors and callers giving up are not counted).",
		}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_breaker_state",
			Help: "State of the store circuit breaker: 0 closed, 1 half-open, 2 open.",
		}, []string{"breaker"}),
		denyCacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_deny_cache_hits_total",
			Help: "Checks denied from the local deny cache without a store round trip.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_shed_total",
			Help: "Checks this process was past its capacity for: the queue for the store full, a check's wait past --max-wait, or a store call missing its deadline while the store answered others. Fail-closed rules refuse them (503 overloaded, RESOURCE_EXHAUSTED); open and local rules answer them by their failure mode.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_checks_in_flight",
			Help: "Checks waiting for the store right now.",
		}),
		budgetRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_memory_budget_refusals_total",
			Help: "Checks the embedded memory store refused because their tenant (or the store) had no room for a new counter; they got their rule's failure policy.",
		}),
		watchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_catalog_watch_errors_total",
			Help: "Failed looks of the catalog change feed (a version read, or PostgreSQL's LISTEN connection); each is retried, but changes and key revocations wait until one succeeds.",
		}),
	}
	m.holds = newHoldMetrics(reg)
	m.quotaLeases = newQuotaLeaseMetrics(reg)
	m.envoyLoads = newEnvoyLoadMetrics(reg)
	if reg == nil {
		return m
	}
	m.reg = reg
	m.decisions = register(reg, m.decisions)
	m.checkDuration = register(reg, m.checkDuration)
	m.storeDuration = register(reg, m.storeDuration)
	m.storeErrors = register(reg, m.storeErrors)
	m.breakerState = register(reg, m.breakerState)
	m.denyCacheHits = register(reg, m.denyCacheHits)
	m.shed = register(reg, m.shed)
	m.inFlight = register(reg, m.inFlight)
	m.budgetRefused = register(reg, m.budgetRefused)
	m.watchErrors = register(reg, m.watchErrors)
	return m
}

// register registers c, or returns the identical collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	// Only a programming error (a conflicting metric of the same name) gets
	// here; like prometheus.MustRegister, fail loudly at start.
	panic(err)
}

// Labels name the decisions of one rule on one face. Tenant is set by the
// HTTP service, Domain by the Envoy service; Rule is "" for checks that
// matched no rule.
type Labels struct {
	Source, Tenant, Domain, Rule string
}

// Series holds the decision counters of one Labels, resolved once (each on
// first use, so results that never happen export no series) so that counting
// a decision costs an atomic load and an atomic add. A nil *Series counts
// nothing.
type Series struct {
	labels    Labels
	decisions *prometheus.CounterVec
	counters  [len(results)]atomic.Pointer[prometheus.Counter]
	durations *prometheus.HistogramVec
	check     atomic.Pointer[prometheus.Observer]
}

// results are the Result constants, indexed by resultIndex.
var results = [...]string{ResultAllowed, ResultDenied, ResultDegraded, ResultShadowDenied, ResultShed, ResultNoRule, ResultError}

func resultIndex(result string) int {
	for i, r := range results {
		if r == result {
			return i
		}
	}
	return len(results) - 1 // ResultError
}

// Series returns the counters of l, creating them if needed. Past
// MaxRuleSeries distinct label sets, a new one gets the overflow series of
// its source.
func (m *Metrics) Series(l Labels) *Series {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.series[l]; ok {
		return s
	}
	if m.regular >= m.maxRuleSeries {
		l = Labels{Source: l.Source, Tenant: Overflow, Domain: Overflow, Rule: Overflow}
		if s, ok := m.series[l]; ok {
			return s
		}
	} else {
		m.regular++
	}
	s := &Series{labels: l, decisions: m.decisions, durations: m.checkDuration}
	m.series[l] = s
	return s
}

// DropRule removes the series of a deleted rule (every rule of the tenant or
// domain when rule is ""), so that they stop being exported and free their
// place under the cap.
func (m *Metrics) DropRule(source, tenant, domain, rule string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := range m.series {
		if l.Source == source && l.Tenant == tenant && l.Domain == domain && (rule == "" || l.Rule == rule) {
			delete(m.series, l)
			m.regular--
			m.decisions.DeletePartialMatch(prometheus.Labels{"source": l.Source, "tenant": l.Tenant, "domain": l.Domain, "rule": l.Rule})
			m.holds.drop(l)
		}
	}
}

// Count counts one decision with the given result (a Result constant).
func (s *Series) Count(result string) {
	if s == nil {
		return
	}
	i := resultIndex(result)
	resolved(&s.counters[i], func() prometheus.Counter {
		return s.decisions.WithLabelValues(s.labels.Source, s.labels.Tenant, s.labels.Domain, s.labels.Rule, results[i])
	}).Inc()
}

// ObserveCheck records how long a whole check of s's source took.
func (s *Series) ObserveCheck(d time.Duration) {
	if s == nil {
		return
	}
	resolved(&s.check, func() prometheus.Observer { return s.durations.WithLabelValues(s.labels.Source) }).Observe(d.Seconds())
}

// resolved returns the value p holds, storing resolve's first: a child of a
// metric vector is looked up once (a race resolves the same child twice,
// harmlessly), then read with one atomic load.
func resolved[T any](p *atomic.Pointer[T], resolve func() T) T {
	if v := p.Load(); v != nil {
		return *v
	}
	v := resolve()
	p.Store(&v)
	return v
}

// Labels returns the labels s counts under (the overflow labels when it is
// the overflow series).
func (s *Series) Labels() Labels {
	if s == nil {
		return Labels{}
	}
	return s.labels
}

// Shed counts one check refused for overload.
func (m *Metrics) Shed() {
	if m == nil {
		return
	}
	m.shed.Inc()
}

// SnapshotAge exports sluice_catalog_snapshot_age_seconds, read from age at
// each scrape: how long since the catalog snapshot this instance serves was
// last known to be the newest. Only the first call of a Metrics registers it.
func (m *Metrics) SnapshotAge(age func() time.Duration) {
	if m == nil || m.reg == nil {
		return
	}
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_catalog_snapshot_age_seconds",
		Help: "Seconds since the catalog snapshot served was last known to be the newest (after a reload or a readiness probe that found the catalog current); it grows while the catalog database does not answer.",
	}, func() float64 { return age().Seconds() }))
}

// CatalogWatchError counts one failed look of the catalog change feed.
func (m *Metrics) CatalogWatchError() {
	if m == nil {
		return
	}
	m.watchErrors.Inc()
}

// BudgetRefused counts one check the memory store refused for want of room.
func (m *Metrics) BudgetRefused() {
	if m == nil {
		return
	}
	m.budgetRefused.Inc()
}

// AddInFlight moves the gauge of checks in flight.
func (m *Metrics) AddInFlight(delta float64) {
	if m == nil {
		return
	}
	m.inFlight.Add(delta)
}

// ObserveStore records one store call: its duration, and an error if it
// failed. Callers do not report input errors (sluice.ErrInvalid) or their own
// cancellations as store errors.
func (m *Metrics) ObserveStore(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeDuration.Observe(d.Seconds())
	if err != nil {
		m.storeErrors.Inc()
	}
}

// SetBreakerState records the state ("closed", "half-open" or "open") of the
// named circuit breaker.
func (m *Metrics) SetBreakerState(breaker, state string) {
	if m == nil {
		return
	}
	v := 0.0
	switch state {
	case BreakerHalfOpen:
		v = 1
	case BreakerOpen:
		v = 2
	}
	m.breakerState.WithLabelValues(breaker).Set(v)
}

// DenyCacheHit counts one check answered by the local deny cache.
func (m *Metrics) DenyCacheHit() {
	if m == nil {
		return
	}
	m.denyCacheHits.Inc()
}
