package check_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

// BenchmarkLeaseColdKey: a check of a key that is never hot, on a rule
// that leases and on the same rule that does not (the reference): the
// hotness tracking must not cost a cold key more than noise.
func BenchmarkLeaseColdKey(b *testing.B) {
	subjects := make([]string, 1<<16)
	for i := range subjects {
		subjects[i] = "s" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name   string
		limits []sluice.Limit
	}{{"direct", hourly(1 << 40)}, {"leasing_rule", auto(hourly(1 << 40)...)}} {
		b.Run(bc.name, func(b *testing.B) {
			e := check.New(newMemory(b), check.Options{LeaseHotRate: 1 << 30, DenyCacheSize: -1})
			defer e.Close()
			rule := e.NewRule(metrics.Labels{Source: "bench", Rule: "r"}, check.Rule{Namespace: "t", Name: "r", Limits: bc.limits})
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := e.Check(ctx, check.Query{Rule: rule, Subject: subjects[i&(len(subjects)-1)], Cost: 1}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkLeaseHotKey: every check on one key, leased and direct.
func BenchmarkLeaseHotKey(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits []sluice.Limit
	}{{"direct", hourly(1 << 40)}, {"leased", auto(hourly(1 << 40)...)}} {
		b.Run(bc.name, func(b *testing.B) {
			e := check.New(newMemory(b), check.Options{LeaseHotRate: 1, LeaseTTL: 10 * time.Second, DenyCacheSize: -1})
			defer e.Close()
			rule := e.NewRule(metrics.Labels{Source: "bench", Rule: "r"}, check.Rule{Namespace: "t", Name: "r", Limits: bc.limits})
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := e.Check(ctx, check.Query{Rule: rule, Subject: "hot", Cost: 1}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
