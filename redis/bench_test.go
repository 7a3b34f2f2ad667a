package redis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

var benchLimits = []sluice.Limit{
	sluice.TokenBucket(1_000_000, 1_000_000).Named("burst"),
	sluice.SlidingWindow(1_000_000, time.Minute).Named("minute"),
}

// BenchmarkCheck is one check of two limits (token bucket + sliding window) on
// a private local redis-server: one script call per check. Parallel runs are
// pipelined by rueidis over shared connections.
func BenchmarkCheck(b *testing.B) {
	srv := testenv.Redis(b)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	b.Run("serial/hot", func(b *testing.B) {
		b.ReportAllocs()
		req := sluice.Request{Rule: "bench", Subject: "hot", Limits: benchLimits, Cost: 1}
		for b.Loop() {
			if _, err := store.Check(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel/hot", func(b *testing.B) {
		b.ReportAllocs()
		req := sluice.Request{Rule: "bench", Subject: "hot", Limits: benchLimits, Cost: 1}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := store.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("parallel/spread", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			req := sluice.Request{Rule: "bench", Limits: benchLimits, Cost: 1}
			for pb.Next() {
				req.Subject = keys[next.Add(1)%int64(len(keys))]
				if _, err := store.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	})

	// The reference in the same run: the cheapest possible write round trip,
	// a bare INCR on the same server and client library.
	opt, _ := sluiceredis.ParseURL(srv.URL())
	client, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	b.Run("reference-incr/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := client.Do(ctx, client.B().Incr().Key("ref").Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference-incr/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := client.Do(ctx, client.B().Incr().Key("ref").Build()).Error(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
