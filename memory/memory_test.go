package memory_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s := memory.New(memory.Options{Clock: func() time.Time { return storetest.Base }})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestConcurrentChecksAdmitExactlyTheCapacity(t *testing.T) {
	store := memory.New(memory.Options{})
	defer store.Close()
	var limiters []*sluice.Limiter
	for i := 0; i < 4; i++ {
		lim, err := sluice.NewLimiter(store, "atomic", sluice.TokenBucket(50, 1e-6), sluice.FixedWindow(1000, 24*time.Hour).Named("daily"))
		if err != nil {
			t.Fatal(err)
		}
		limiters = append(limiters, lim)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := limiters[i%4].Allow(context.Background(), "hot")
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 50 {
		t.Fatalf("admitted %d, want exactly 50", allowed.Load())
	}
}

func TestIdleKeysAreEvicted(t *testing.T) {
	now := storetest.Base
	store := memory.New(memory.Options{Clock: func() time.Time { return now }, SweepInterval: time.Hour})
	defer store.Close()
	limits := []sluice.Limit{sluice.TokenBucket(10, 10).Named("b")}
	for i := 0; i < 1000; i++ {
		req := sluice.Request{Rule: "r", Subject: strconv.Itoa(i), Limits: limits, Cost: 1, Now: now}
		if _, err := store.Check(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if store.Len() != 1000 {
		t.Fatalf("holds %d keys, want 1000", store.Len())
	}
	// One token refills in 100ms: then every bucket is full and worthless.
	now = now.Add(99 * time.Millisecond)
	store.Sweep()
	if store.Len() != 1000 {
		t.Fatalf("swept keys that still hold state: %d left", store.Len())
	}
	now = now.Add(time.Millisecond)
	store.Sweep()
	if store.Len() != 0 {
		t.Fatalf("%d full buckets kept after sweep", store.Len())
	}
}

func TestKeyCapBoundsMemory(t *testing.T) {
	store := memory.New(memory.Options{MaxKeys: 640, MaxKeysPerTenant: 200})
	defer store.Close()
	limits := []sluice.Limit{sluice.SlidingWindow(10, time.Hour).Named("w")}
	for i := 0; i < 10_000; i++ {
		req := sluice.Request{Tenant: strconv.Itoa(i % 7), Rule: "r", Subject: strconv.Itoa(i), Limits: limits, Cost: 1}
		if _, err := store.Check(context.Background(), req); err != nil && !errors.Is(err, memory.ErrBudgetExhausted) {
			t.Fatal(err)
		}
	}
	if n := store.Len(); n != 640 {
		t.Fatalf("holds %d keys, want the cap, 640", n)
	}
}
