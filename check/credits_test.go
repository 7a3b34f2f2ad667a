package check_test

import (
	"context"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/memory"
)

// TestDenyCacheNeverAnswersForCredits: a credits deny is never served from
// the deny cache, since a top-up (not time) raises a balance: after a top-up
// made behind this engine's back (another instance's, whose announcement
// has not arrived), the next check is the store's, and admitted. The rule's
// other limit would let the cache answer if it could.
func TestDenyCacheNeverAnswersForCredits(t *testing.T) {
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	e := check.New(store, check.Options{})
	t.Cleanup(func() { e.Close() })
	credits := sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 1, Mode: sluice.RefillSet})
	rule := &check.Rule{Namespace: "acme", Name: "api", Limits: []sluice.Limit{sluice.TokenBucket(100, 1).Named("burst"), credits}}
	ctx := context.Background()
	for i, want := range []bool{true, false, false} {
		res, err := e.Check(ctx, check.Query{Rule: rule, Subject: "cust", Cost: 1})
		if err != nil || res.Decision.Allowed != want {
			t.Fatalf("check %d: %v, %v; want allowed %v", i, res.Decision, err, want)
		}
	}
	if _, err := store.TopUp(ctx, sluice.TopUp{Tenant: "acme", Rule: "api", Subject: "cust", Limit: credits, Add: 1, IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Check(ctx, check.Query{Rule: rule, Subject: "cust", Cost: 1})
	if err != nil || !res.Decision.Allowed {
		t.Fatalf("a check after a top-up: %v, %v; want it admitted, not a cached deny", res.Decision, err)
	}
}
