package storetest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// BenchLimits is what every store benchmark checks: two limits at once, the
// realistic case rather than the cheapest.
var BenchLimits = []sluice.Limit{
	sluice.TokenBucket(1_000_000, 1_000_000).Named("burst"),
	sluice.SlidingWindow(1_000_000, time.Minute).Named("minute"),
}

// BenchmarkCheck runs the same store benchmarks for every store: serial and
// parallel on one hot subject (with GOMAXPROCS and with 64 goroutines), and
// parallel across 10,000 subjects.
func BenchmarkCheck(b *testing.B, store sluice.Store) {
	ctx := context.Background()
	subjects := make([]string, 10_000)
	for i := range subjects {
		subjects[i] = "user-" + strconv.Itoa(i)
	}
	// check fails b with Error, not Fatal: it runs on RunParallel's
	// goroutines too, where FailNow must not be called. The caller stops.
	check := func(b *testing.B, req sluice.Request) bool {
		if _, err := store.Check(ctx, req); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	hot := sluice.Request{Rule: "bench", Subject: "hot", Limits: BenchLimits, Cost: 1}
	b.Run("serial/hot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !check(b, hot) {
				return
			}
		}
	})
	b.Run("parallel/hot", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && check(b, hot) {
			}
		})
	})
	// 64 goroutines (32 per CPU): many requests in flight at once, as in a
	// busy server, so a networked store can pipeline them.
	b.Run("parallel64/hot", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && check(b, hot) {
			}
		})
	})
	b.Run("parallel/spread", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			req := hot
			for pb.Next() {
				req.Subject = subjects[next.Add(1)%int64(len(subjects))]
				if !check(b, req) {
					return
				}
			}
		})
	})
}
