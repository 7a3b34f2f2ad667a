package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// BenchmarkRemoteDecision compares a request decided by a call to the
// service (Check) with one decided by a LeasedLimiter from units in hand
// (a lease call per 1,000), against the real service on loopback.
func BenchmarkRemoteDecision(b *testing.B) {
	l := sluice.FixedWindow(1<<40, time.Hour).Named("hour")
	l.Lease = sluice.LeaseAuto
	url, secret := startService(b, sluice.Rule{Tenant: "acme", Name: "hot", Route: "/hot", Limits: []sluice.Limit{l}})
	c, err := client.New(url, secret)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if res, err := c.Check(ctx, "/hot", "s", 1); err != nil || !res.Allowed {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("leased", func(b *testing.B) {
		lim := c.NewLeasedLimiter("/hot", "s", client.LeaseOptions{Want: 1000, TTL: 10 * time.Second})
		defer lim.Close(ctx)
		for b.Loop() {
			if res, err := lim.Allow(ctx); err != nil || !res.Allowed {
				b.Fatal(res, err)
			}
		}
	})
}
