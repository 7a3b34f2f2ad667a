package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
)

// TestCreditsNeverFallBackToLocal: with the store down, a fail-local rule
// with a credits limit fails closed instead of spending a fresh local
// balance; the same rule without one falls back as before.
func TestCreditsNeverFallBackToLocal(t *testing.T) {
	store := newSwitchable(t)
	g := guard.New(store, guard.Options{FailureThreshold: 100})
	defer g.Close()
	store.state.Store(failing)
	credits := sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 100, Mode: sluice.RefillSet})
	req := request("u")
	req.Limits = append(req.Limits, credits)
	if d, err := g.Check(context.Background(), req, sluice.FailLocal); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("a credits check with the store down, failing local: %v, %v; want the store unavailable", d, err)
	}
	if d, err := g.Check(context.Background(), request("u"), sluice.FailLocal); err != nil || !d.Allowed || !d.Degraded {
		t.Fatalf("a check without credits, failing local: %v, %v; want a degraded allow", d, err)
	}
	up := sluice.TopUp{Rule: "api", Subject: "u", Limit: credits, Add: 5, IdempotencyKey: "k"}
	if _, err := g.TopUp(context.Background(), up); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("a top-up with the store down: %v; want the store unavailable", err)
	}
	store.state.Store(healthy)
	if res, err := g.TopUp(context.Background(), up); err != nil || res != (sluice.TopUpResult{Balance: 105, Applied: true}) {
		t.Fatalf("a top-up with the store back: %+v, %v", res, err)
	}
}

func (s *switchableStore) TopUp(ctx context.Context, t sluice.TopUp) (sluice.TopUpResult, error) {
	s.calls.Add(1)
	if s.state.Load() != healthy {
		return sluice.TopUpResult{}, errBroken
	}
	return s.inner.TopUp(ctx, t)
}
