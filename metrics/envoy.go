package metrics

import "github.com/prometheus/client_golang/prometheus"

// Results of sluice_envoy_config_loads_total.
const (
	EnvoyLoadSuccess = "success"
	EnvoyLoadFailure = "failure"
)

// envoyLoadMetrics count loads of the Envoy rate-limit configuration, so a
// broken file is an alert rather than one log line.
type envoyLoadMetrics struct {
	loads       *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	// lastFailure after lastSuccess means the files in place do not load.
	lastFailure prometheus.Gauge
}

func newEnvoyLoadMetrics(reg prometheus.Registerer) envoyLoadMetrics {
	e := envoyLoadMetrics{
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_envoy_config_loads_total",
			Help: "Loads of the Envoy rate-limit configuration (at start and on every change), by result: success, or failure (the last good configuration stays in force).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_envoy_config_last_success_timestamp_seconds",
			Help: "Unix time of the last successful load of the Envoy rate-limit configuration.",
		}),
		lastFailure: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_envoy_config_last_failure_timestamp_seconds",
			Help: "Unix time of the last failed load of the Envoy rate-limit configuration (0: none since start); later than the last success means the files in place do not load.",
		}),
	}
	// Both results exist from the start, so increase() sees the first failure.
	e.loads.WithLabelValues(EnvoyLoadSuccess)
	e.loads.WithLabelValues(EnvoyLoadFailure)
	if reg != nil {
		e.loads = register(reg, e.loads)
		e.lastSuccess = register(reg, e.lastSuccess)
		e.lastFailure = register(reg, e.lastFailure)
	}
	return e
}

// EnvoyConfigLoaded counts one load of the Envoy rate-limit configuration:
// ok when it succeeded, else a failure (the last good one stays in force).
func (m *Metrics) EnvoyConfigLoaded(ok bool) {
	if m == nil {
		return
	}
	if !ok {
		m.envoyLoads.loads.WithLabelValues(EnvoyLoadFailure).Inc()
		m.envoyLoads.lastFailure.SetToCurrentTime()
		return
	}
	m.envoyLoads.loads.WithLabelValues(EnvoyLoadSuccess).Inc()
	m.envoyLoads.lastSuccess.SetToCurrentTime()
}
