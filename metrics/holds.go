package metrics

import "github.com/prometheus/client_golang/prometheus"

// Lease outcomes, the values of sluice_lease_ends_total's "how" label.
const (
	LeaseReleased = "released" // settled or released by its holder
	LeaseExpired  = "expired"  // found expired: its holder crashed or forgot
)

// holdMetrics count the leases of concurrency limits.
type holdMetrics struct {
	held  *prometheus.GaugeVec
	ended *prometheus.CounterVec
}

func newHoldMetrics(reg prometheus.Registerer) holdMetrics {
	h := holdMetrics{
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_leases_held",
			Help: "Concurrency-limit leases taken and not yet released or found expired, per rule. Each instance counts the leases it took, released or found expired, so the sum over instances is the fleet's.",
		}, []string{"source", "tenant", "domain", "rule"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_lease_ends_total",
			Help: "Concurrency-limit leases ended, per rule and how: released (settled or released by the holder) or expired (found past its TTL: a holder that crashed or forgot to release).",
		}, []string{"source", "tenant", "domain", "rule", "how"}),
	}
	if reg != nil {
		h.held = register(reg, h.held)
		h.ended = register(reg, h.ended)
	}
	return h
}

// LeasesTaken counts n leases taken by a check of s.
func (m *Metrics) LeasesTaken(s *Series, n int64) {
	if m == nil || n == 0 {
		return
	}
	l := s.Labels()
	m.holds.held.WithLabelValues(l.Source, l.Tenant, l.Domain, l.Rule).Add(float64(n))
}

// LeasesEnded counts n leases of s's rule ended how (LeaseReleased or
// LeaseExpired).
func (m *Metrics) LeasesEnded(s *Series, how string, n int64) {
	if m == nil || n == 0 {
		return
	}
	l := s.Labels()
	m.holds.held.WithLabelValues(l.Source, l.Tenant, l.Domain, l.Rule).Sub(float64(n))
	m.holds.ended.WithLabelValues(l.Source, l.Tenant, l.Domain, l.Rule, how).Add(float64(n))
}

// drop removes the lease series of l (a deleted rule).
func (h holdMetrics) drop(l Labels) {
	match := prometheus.Labels{"source": l.Source, "tenant": l.Tenant, "domain": l.Domain, "rule": l.Rule}
	h.held.DeletePartialMatch(match)
	h.ended.DeletePartialMatch(match)
}
