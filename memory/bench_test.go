package memory_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
)

var benchLimits = []sluice.Limit{
	sluice.TokenBucket(1_000_000, 1_000_000).Named("burst"),
	sluice.SlidingWindow(1_000_000, time.Minute).Named("minute"),
}

func subjects(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = "user-" + strconv.Itoa(i)
	}
	return s
}

// BenchmarkCheck is one check of two limits (token bucket + sliding window).
// "hot" is one subject every goroutine shares; "spread" cycles through 10,000.
func BenchmarkCheck(b *testing.B) {
	store := memory.New(memory.Options{})
	defer store.Close()
	ctx := context.Background()
	keys := subjects(10_000)
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
}

// BenchmarkReferenceMutexCounter is the floor to read the numbers above
// against: a map of counters behind one mutex, with none of the algorithms.
func BenchmarkReferenceMutexCounter(b *testing.B) {
	var mu sync.Mutex
	counts := map[string]int64{}
	b.Run("parallel/hot", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				counts["hot"]++
				mu.Unlock()
			}
		})
	})
}
