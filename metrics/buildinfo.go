package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is sluice_build_info{version,revision,goversion} 1, the series
// that says which build of Sluice a process runs, so a dashboard can tell a
// fleet mid-rollout apart. Every face's process registers one.
func BuildInfo(version, revision string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "Always 1; the labels say which build of Sluice is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
