package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// TestHoldsAgainstTheService takes, settles, releases and extends holds
// through the real check API.
func TestHoldsAgainstTheService(t *testing.T) {
	ctx := context.Background()
	url, secret := startService(t, sluice.Rule{Tenant: "acme", Name: "gen", Route: "/gen",
		Limits:      []sluice.Limit{sluice.TokenBucket(1000, 1e-3).Named("tokens"), sluice.Concurrency(100, time.Minute).Named("inflight")},
		FailureMode: sluice.FailClosed})
	c, err := client.New(url, secret)
	if err != nil {
		t.Fatal(err)
	}

	res, err := c.Reserve(ctx, "/gen", "u", 60)
	if err != nil || !res.Allowed || res.Hold == nil || res.Hold.ExpiresIn != time.Minute {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if res, err := c.Check(ctx, "/gen", "u", 50); err != nil || res.Allowed || res.Hold != nil {
		t.Fatalf("second check while the lease is held: %+v %v", res, err)
	}
	if d, status, err := c.Extend(ctx, res.Hold.ID); err != nil || status != sluice.HoldExtended || d != time.Minute {
		t.Fatalf("extend: %v %q %v", d, status, err)
	}
	if err := c.Settle(ctx, res.Hold.ID, 10); err != nil {
		t.Fatalf("settle: %v", err)
	}
	var e *client.Error
	if err := c.Settle(ctx, res.Hold.ID, 10); !errors.As(err, &e) || e.StatusCode != 409 || e.Code != "hold_finished" {
		t.Fatalf("second settle: %v, want a 409 hold_finished", err)
	}
	if status, err := c.Release(ctx, res.Hold.ID); err != nil || status != sluice.HoldFinished {
		t.Fatalf("release after settle: %q %v", status, err)
	}
	// The refund is back (990 of 1000) and the lease free.
	after, err := c.Check(ctx, "/gen", "u", 0)
	if err != nil || after.Limits[0].Remaining != 990 || after.Limits[1].Remaining != 100 {
		t.Fatalf("after settle: %+v %v", after, err)
	}
}
