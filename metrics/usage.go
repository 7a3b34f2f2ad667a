package metrics

import "github.com/prometheus/client_golang/prometheus"

// UsageRollups exports the state of this instance's usage rollups, read at
// each scrape: sluice_usage_rows_pending (rows waiting for the catalog
// database) and sluice_usage_rows_dropped_total (rows dropped because the
// buffer was full while the database could not be written: history lost,
// which shows as a gap in the usage charts). Only the first call of a
// Metrics registers them.
func (m *Metrics) UsageRollups(pending func() int, dropped func() int64) {
	if m == nil || m.reg == nil {
		return
	}
	_ = m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_usage_rows_pending",
		Help: "Usage rollup rows (one per tenant or domain, rule and minute) waiting to be written to the catalog database.",
	}, func() float64 { return float64(pending()) }))
	_ = m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sluice_usage_rows_dropped_total",
		Help: "Usage rollup rows dropped, oldest first, because the bounded buffer was full while the catalog database could not be written.",
	}, func() float64 { return float64(dropped()) }))
}
