package check_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

// TestHoldsAndTheDenyCache: the deny cache stays exact with holds.
func TestHoldsAndTheDenyCache(t *testing.T) {
	ctx := context.Background()
	newEngine := func(t *testing.T) *check.Engine {
		e := check.New(newMemory(t), check.Options{})
		t.Cleanup(func() { e.Close() })
		return e
	}
	labels := metrics.Labels{Source: "test"}

	t.Run("a_concurrency_deny_is_never_remembered", func(t *testing.T) {
		e := newEngine(t)
		r := e.NewRule(labels, check.Rule{Namespace: "t", Name: "c", Limits: []sluice.Limit{sluice.Concurrency(1, time.Minute).Named("c")}})
		first, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1})
		if err != nil || !first.Pass() || first.Decision.Hold == nil {
			t.Fatalf("first: %+v %v", first, err)
		}
		if res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || res.Pass() {
			t.Fatalf("second: %+v %v", res, err)
		}
		if n := e.DenyCacheLen(); n != 0 {
			t.Fatalf("deny cache holds %d entries after a concurrency deny, want 0", n)
		}
		if _, err := e.Hold(ctx, labels, sluice.HoldOp{Tenant: "t", ID: first.Decision.Hold.ID, Action: sluice.HoldRelease}); err != nil {
			t.Fatal(err)
		}
		if res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || !res.Pass() {
			t.Fatalf("after the release: %+v %v", res, err)
		}
	})

	t.Run("a_rate_deny_of_a_rule_with_a_concurrency_limit_is_remembered", func(t *testing.T) {
		e := newEngine(t)
		r := e.NewRule(labels, check.Rule{Namespace: "t", Name: "both", Limits: []sluice.Limit{
			sluice.Concurrency(5, time.Minute).Named("c"), sluice.FixedWindow(1, time.Hour).Named("w")}})
		first, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1})
		if err != nil || !first.Pass() {
			t.Fatalf("first: %+v %v", first, err)
		}
		if res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || res.Pass() || res.Decision.Hold != nil {
			t.Fatalf("second: %+v %v", res, err)
		}
		// While a lease is held the cache cannot know the concurrency
		// limit's figures (the lease may expire meanwhile): the store
		// answers.
		if res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || res.Pass() || res.Cached {
			t.Fatalf("third: %+v %v, want the store's deny", res, err)
		}
		if _, err := e.Hold(ctx, labels, sluice.HoldOp{Tenant: "t", ID: first.Decision.Hold.ID, Action: sluice.HoldRelease}); err != nil {
			t.Fatal(err)
		}
		if res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || res.Pass() || res.Cached {
			t.Fatalf("fourth: %+v %v, want the store's deny", res, err)
		}
		res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1})
		if err != nil || res.Pass() || !res.Cached || res.Decision.Limits[0].Remaining != 5 {
			t.Fatalf("fifth: %+v %v, want a cached deny (the window's figures are exact, no lease is held)", res, err)
		}
	})

	t.Run("a_refund_forgets_the_subjects_denies", func(t *testing.T) {
		e := newEngine(t)
		r := e.NewRule(labels, check.Rule{Namespace: "t", Name: "w", Limits: []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("w")}})
		reserved, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 10, Reserve: true})
		if err != nil || reserved.Decision.Hold == nil {
			t.Fatalf("reserve: %+v %v", reserved, err)
		}
		if res, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || res.Pass() || e.DenyCacheLen() != 1 {
			t.Fatalf("over the window: %+v %v, cache %d", res, err, e.DenyCacheLen())
		}
		res, err := e.Hold(ctx, labels, sluice.HoldOp{Tenant: "t", ID: reserved.Decision.Hold.ID, Action: sluice.HoldSettle, Cost: 4})
		if err != nil || res.Status != sluice.HoldSettled || !res.Refunded {
			t.Fatalf("settle: %+v %v", res, err)
		}
		if after, err := e.Check(ctx, check.Query{Rule: r, Subject: "s", Cost: 1}); err != nil || !after.Pass() || after.Cached {
			t.Fatalf("after a refund: %+v %v, want allowed by the store", after, err)
		}
	})
}
