package metrics

import "github.com/prometheus/client_golang/prometheus"

// Quota lease unit outcomes, the values of sluice_quota_lease_units_total's
// "how" label.
const (
	QuotaUnitsGranted  = "granted"  // leased from the store
	QuotaUnitsReturned = "returned" // given back unused
	QuotaUnitsExpired  = "expired"  // unused when the lease ran out: stay consumed
)

// Remote quota lease calls, the values of
// sluice_quota_remote_lease_calls_total's "call" label.
const (
	QuotaCallTake   = "take"   // a lease granted or refused
	QuotaCallRenew  = "renew"  // a lease returned and a new one asked, in one store call when it names its route
	QuotaCallReturn = "return" // a lease's unused units given back
)

// Who decided checks from leased units, the values of
// sluice_quota_lease_store_calls_saved_total's "holder" label.
const (
	QuotaHolderInstance = "instance" // this instance's engine, for its hot keys
	QuotaHolderRemote   = "remote"   // remote holders, as their renews and returns report
)

// quotaLeaseMetrics count this instance's quota leases (issue 22): not the
// concurrency-limit leases of holds.go.
type quotaLeaseMetrics struct {
	keys  prometheus.Gauge
	units *prometheus.CounterVec
	saved *prometheus.CounterVec
	// savedInstance and savedRemote are saved's children, resolved once.
	savedInstance, savedRemote prometheus.Counter
	// remote counts the lease calls of remote holders (the Go client's
	// leasing limiter): each is a store call.
	remote                   *prometheus.CounterVec
	take, renew, returnCalls prometheus.Counter
	// granted, returned, expired are units' children, resolved once.
	granted, returned, expired prometheus.Counter
}

func newQuotaLeaseMetrics(reg prometheus.Registerer) quotaLeaseMetrics {
	q := quotaLeaseMetrics{
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_quota_leased_keys",
			Help: "Keys (rule and subject) this instance holds a quota lease for: hot keys decided in process from leased units.",
		}),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_lease_units_total",
			Help: "Quota lease units, by how: granted by the store, returned unused, or expired (unused when the lease ran out, so they stay consumed).",
		}, []string{"how"}),
		saved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_lease_store_calls_saved_total",
			Help: "Checks decided in process from a quota lease, each a store call saved, by holder: instance (this instance's hot keys) or remote (remote holders' requests admitted from their leases without a call, counted when a renew or return reports the units used; a lease that expires unreturned reports none).",
		}, []string{"holder"}),
		remote: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_remote_lease_calls_total",
			Help: "Quota lease calls of remote holders (POST /v1/leases and its renew and return), by call: take (a grant asked), return (unused units given back) and renew (the old lease returned and a new one granted): one store call each, but a renew that does not name its route, which is a return then a take, each counted too.",
		}, []string{"call"}),
	}
	if reg != nil {
		q.keys = register(reg, q.keys)
		q.units = register(reg, q.units)
		q.saved = register(reg, q.saved)
		q.remote = register(reg, q.remote)
	}
	q.savedInstance = q.saved.WithLabelValues(QuotaHolderInstance)
	q.savedRemote = q.saved.WithLabelValues(QuotaHolderRemote)
	q.take = q.remote.WithLabelValues(QuotaCallTake)
	q.renew = q.remote.WithLabelValues(QuotaCallRenew)
	q.returnCalls = q.remote.WithLabelValues(QuotaCallReturn)
	q.granted = q.units.WithLabelValues(QuotaUnitsGranted)
	q.returned = q.units.WithLabelValues(QuotaUnitsReturned)
	q.expired = q.units.WithLabelValues(QuotaUnitsExpired)
	return q
}

// QuotaLeasedKeys moves the count of leased keys by delta.
func (m *Metrics) QuotaLeasedKeys(delta int) {
	if m != nil {
		m.quotaLeases.keys.Add(float64(delta))
	}
}

// QuotaLeaseUnits counts n lease units ended or granted how.
func (m *Metrics) QuotaLeaseUnits(how string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	switch how {
	case QuotaUnitsGranted:
		m.quotaLeases.granted.Add(float64(n))
	case QuotaUnitsReturned:
		m.quotaLeases.returned.Add(float64(n))
	default:
		m.quotaLeases.expired.Add(float64(n))
	}
}

// QuotaLeaseSaved counts a check this instance decided from a lease
// without a store call.
func (m *Metrics) QuotaLeaseSaved() {
	if m != nil {
		m.quotaLeases.savedInstance.Inc()
	}
}

// QuotaRemoteLeaseSaved counts n requests a remote holder decided from its
// lease without a call.
func (m *Metrics) QuotaRemoteLeaseSaved(n int64) {
	if m != nil && n > 0 {
		m.quotaLeases.savedRemote.Add(float64(n))
	}
}

// QuotaRemoteLeaseCall counts a remote holder's lease call.
func (m *Metrics) QuotaRemoteLeaseCall(call string) {
	if m == nil {
		return
	}
	switch call {
	case QuotaCallTake:
		m.quotaLeases.take.Inc()
	case QuotaCallRenew:
		m.quotaLeases.renew.Inc()
	default:
		m.quotaLeases.returnCalls.Inc()
	}
}
