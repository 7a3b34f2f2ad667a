package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// BenchmarkCheck runs storetest.BenchmarkCheck on a private local
// redis-server: one script call per check, pipelined by rueidis over shared
// connections when parallel.
func BenchmarkCheck(b *testing.B) {
	srv := testenv.Redis(b)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	storetest.BenchmarkCheck(b, store)

	// The reference in the same run: the cheapest possible write round trip,
	// a bare INCR on the same server and client library.
	opt, _ := sluiceredis.ParseURL(srv.URL())
	client, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	// incr fails b with Error, not Fatal: it runs on RunParallel's
	// goroutines too, where FailNow must not be called. The caller stops.
	incr := func(b *testing.B) bool {
		if err := client.Do(ctx, client.B().Incr().Key("ref").Build()).Error(); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	b.Run("reference-incr/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() && incr(b) {
		}
	})
	b.Run("reference-incr/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && incr(b) {
			}
		})
	})
	b.Run("reference-incr/parallel64", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && incr(b) {
			}
		})
	})
}

// BenchmarkFlushDelay measures Options.MaxFlushDelay and PipelineMultiplex
// on the hot subject: time per check, and CPU per check of this process
// (client-cpu-ns/op, getrusage) and of redis-server (redis-cpu-ns/op, its
// INFO cpu). delay=0 is no delay.
func BenchmarkFlushDelay(b *testing.B) {
	srv := testenv.Redis(b)
	ctx := context.Background()
	hot := sluice.Request{Rule: "bench", Subject: "hot", Limits: storetest.BenchLimits, Cost: 1}
	defer func() { flushDelayRuns++ }()
	for _, conns := range []struct {
		name      string
		multiplex int
	}{{"conns=2", 0}, {"conns=1", -1}} {
		// The machine's load drifts; each run (-count) starts the delays at
		// the next position so that no delay always runs first or last.
		delays := []time.Duration{0, 20 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond}
		r := flushDelayRuns % len(delays)
		delays = append(delays[r:], delays[:r]...)
		for _, delay := range delays {
			opts := sluiceredis.Options{MaxFlushDelay: delay, PipelineMultiplex: conns.multiplex}
			if delay == 0 {
				opts.MaxFlushDelay = -1
			}
			store, err := sluiceredis.Open(srv.URL(), opts)
			if err != nil {
				b.Fatal(err)
			}
			// check fails b with Error, not Fatal (see incr).
			check := func(b *testing.B) bool {
				if _, err := store.Check(ctx, hot); err != nil {
					b.Error(err)
					return false
				}
				return true
			}
			name := fmt.Sprintf("%s/delay=%s", conns.name, delay)
			b.Run(name+"/serial", func(b *testing.B) {
				defer measureCPU(b, srv)()
				for b.Loop() && check(b) {
				}
			})
			b.Run(name+"/parallel64", func(b *testing.B) {
				defer measureCPU(b, srv)()
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && check(b) {
					}
				})
			})
			store.Close()
		}
	}
}

var flushDelayRuns int

// measureCPU returns a function that reports the CPU time this process and
// srv spent since, per op.
func measureCPU(b *testing.B, srv *testenv.RedisServer) func() {
	b.Helper()
	self0, redis0 := processCPU(b), redisCPU(b, srv)
	return func() {
		self, redis := processCPU(b)-self0, redisCPU(b, srv)-redis0
		n := float64(b.N)
		b.ReportMetric(float64(self.Nanoseconds())/n, "client-cpu-ns/op")
		b.ReportMetric(float64(redis.Nanoseconds())/n, "redis-cpu-ns/op")
		b.ReportMetric(float64((self+redis).Nanoseconds())/n, "cpu-ns/op")
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is used_cpu_sys + used_cpu_user of INFO cpu (seconds, to the
// microsecond).
func redisCPU(b *testing.B, srv *testenv.RedisServer) time.Duration {
	info, err := srv.Do("INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * 1e9)
}

// BenchmarkRedisCPUPerCheck measures the CPU per check of this process and
// of redis-server (redis-cpu-ns/op) for one-limit checks of 1,000 subjects:
// a fixed window (as envoyproxy/ratelimit's YAML makes) and a token bucket,
// from one caller and from 64. Issue 29 compares it across commits.
func BenchmarkRedisCPUPerCheck(b *testing.B) {
	srv := testenv.Redis(b)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	for _, l := range []sluice.Limit{sluice.FixedWindow(1_000_000_000, time.Hour).Named("hour"),
		sluice.TokenBucket(1_000_000_000, 1_000_000).Named("bucket")} {
		var n atomic.Int64
		// check fails b with Error, not Fatal (see incr in BenchmarkCheck).
		check := func(b *testing.B) bool {
			i := n.Add(1)
			req := sluice.Request{Tenant: "bench", Rule: "cpu", Subject: "s" + strconv.FormatInt(i%1000, 10),
				Limits: []sluice.Limit{l}, Cost: 1}
			if _, err := store.Check(ctx, req); err != nil {
				b.Error(err)
				return false
			}
			return true
		}
		b.Run(string(l.Algorithm)+"/serial", func(b *testing.B) {
			defer measureCPU(b, srv)()
			for b.Loop() && check(b) {
			}
		})
		b.Run(string(l.Algorithm)+"/parallel64", func(b *testing.B) {
			defer measureCPU(b, srv)()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() && check(b) {
				}
			})
		})
	}
}
