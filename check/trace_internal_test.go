package check

import (
	"context"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// TestCheckWithoutTracingAllocatesNothingMore: with tracing off, a check
// allocates exactly what its deny-cache lookup or its store call allocates
// on their own: tracing adds nothing to the hot path when it is off.
func TestCheckWithoutTracingAllocatesNothingMore(t *testing.T) {
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	e := New(store, Options{})
	t.Cleanup(func() { e.Close() })
	limits := []sluice.Limit{sluice.FixedWindow(1<<40, time.Hour).Named("hour")}
	rule := e.NewRule(metrics.Labels{Source: "test", Tenant: "acme", Rule: "orders"},
		Rule{Namespace: "t1", Name: "orders", Limits: limits})
	ctx := context.Background()

	t.Run("store_call", func(t *testing.T) {
		q := Query{Rule: rule, Subject: "allowed", Cost: 1}
		req := sluice.Request{Tenant: "t1", Rule: "orders", Subject: "allowed", Limits: limits, Cost: 1}
		check := testing.AllocsPerRun(1000, func() {
			if res, err := e.Check(ctx, q); err != nil || res.Outcome != Allowed {
				t.Fatalf("want an allowed check, got %+v, %v", res, err)
			}
		})
		storeAlone := testing.AllocsPerRun(1000, func() {
			if _, err := e.guard.Check(ctx, req, sluice.FailClosed); err != nil {
				t.Fatal(err)
			}
		})
		if check != storeAlone {
			t.Fatalf("a check allocates %v times, its guarded store call alone %v: the engine adds allocations", check, storeAlone)
		}
	})

	t.Run("deny_cache_hit", func(t *testing.T) {
		one := e.NewRule(metrics.Labels{Source: "test", Tenant: "acme", Rule: "one"},
			Rule{Namespace: "t1", Name: "one", Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour).Named("hour")}})
		q := Query{Rule: one, Subject: "denied", Cost: 1}
		for range 2 { // allowed, then denied: the deny is cached
			if _, err := e.Check(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		check := testing.AllocsPerRun(1000, func() {
			if res, err := e.Check(ctx, q); err != nil || !res.Cached {
				t.Fatalf("want a cached deny, got %+v, %v", res, err)
			}
		})
		lookupAlone := testing.AllocsPerRun(1000, func() {
			if _, ok := e.deny.lookup(one, "denied", 1, e.clock()); !ok {
				t.Fatal("the deny is not cached")
			}
		})
		if check != lookupAlone {
			t.Fatalf("a cached deny allocates %v times, its lookup alone %v: the engine adds allocations", check, lookupAlone)
		}
	})
}
