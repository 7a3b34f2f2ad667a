package check_test

import (
	"testing"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/usage"
)

// BenchmarkCheckUsage compares checks with usage rollups off and on, from
// every core at once on one rule (the worst case for shared counters).
func BenchmarkCheckUsage(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "rollups=off"
		var rec *usage.Recorder
		if on {
			name, rec = "rollups=on", usage.NewRecorder(usage.Options{})
		}
		b.Run(name, func(b *testing.B) {
			e := check.New(newMemory(b), check.Options{Usage: rec})
			b.Cleanup(func() { e.Close() })
			r := e.NewRule(metrics.Labels{Tenant: "acme", Rule: "api"}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(1 << 50)})
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := e.Check(b.Context(), check.Query{Rule: r, Subject: "u", Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
