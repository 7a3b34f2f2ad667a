// Package metrics holds the Prometheus collectors shared by every face of
// Sluice: the HTTP check service, the Envoy rate-limit server, the gateway and
// the middleware. They all report into one family of metrics so a dashboard
// reads the same whichever face answered.
//
// No metric is labelled by subject, key, API key or client IP: those are
// unbounded and would explode the series count (and some are secrets). Labels
// are the source, the rule name and the result only.
package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicelabs/sluice"
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
)

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
	decisions     *prometheus.CounterVec
	checkDuration *prometheus.HistogramVec
	storeDuration prometheus.Histogram
	storeErrors   prometheus.Counter
	breakerState  *prometheus.GaugeVec
	denyCacheHits prometheus.Counter
}

// New creates the collectors and registers them with reg. Tests pass their
// own prometheus.NewRegistry(); a process passes prometheus.DefaultRegisterer.
// Several components of one process may call New with the same registerer:
// they then share the already registered collectors instead of failing. A nil
// reg creates unregistered collectors.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate-limit decisions, by source (http, envoy, gateway, middleware), rule and result (allowed, denied, degraded, shadow_denied, no_rule, error).",
		}, []string{"source", "rule", "result"}),
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
	}
	if reg == nil {
		return m
	}
	m.decisions = register(reg, m.decisions)
	m.checkDuration = register(reg, m.checkDuration)
	m.storeDuration = register(reg, m.storeDuration)
	m.storeErrors = register(reg, m.storeErrors)
	m.breakerState = register(reg, m.breakerState)
	m.denyCacheHits = register(reg, m.denyCacheHits)
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

// ObserveDecision counts one decision. rule is the rule's name ("" when none
// matched); result is one of the Result constants.
func (m *Metrics) ObserveDecision(source, rule, result string) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(source, rule, result).Inc()
}

// ObserveCheck records how long a whole check took.
func (m *Metrics) ObserveCheck(source string, d time.Duration) {
	if m == nil {
		return
	}
	m.checkDuration.WithLabelValues(source).Observe(d.Seconds())
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

// Result names the result of decision d for sluice_decisions_total:
// degraded when the failure policy answered, else allowed or denied.
func Result(d sluice.Decision) string {
	switch {
	case d.Degraded:
		return ResultDegraded
	case d.Allowed:
		return ResultAllowed
	}
	return ResultDenied
}
