package memory

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// checkBookkeeping recounts the entries of every tenant and compares them
// with the budgets, which must never drift: a budget that counts too few lets
// a tenant past it, one that counts too many refuses for ever.
func checkBookkeeping(t *testing.T, s *Store) {
	t.Helper()
	counts := map[*budget]int64{}
	total := int64(0)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.entries {
			counts[e.tenant]++
			total++
			if e.expireAt < e.tenant.soonest.Load() || e.expireAt < s.total.soonest.Load() {
				t.Errorf("a counter expires at %d, before its budget's soonest", e.expireAt)
			}
		}
		// Lease sets and hold records take room like counters.
		for key, set := range sh.leases {
			counts[set.tenant]++
			total++
			for _, ls := range set.leases {
				if ls.keepUntil < set.tenant.soonest.Load() || ls.keepUntil < s.total.soonest.Load() {
					t.Errorf("a lease of %q is swept at %d, before its budget's soonest", key, ls.keepUntil)
				}
			}
		}
		for key, rec := range sh.holds {
			counts[rec.budget]++
			total++
			if f := rec.forgetAt(); f < rec.budget.soonest.Load() || f < s.total.soonest.Load() {
				t.Errorf("hold record %q is forgotten at %d, before its budget's soonest", key, f)
			}
		}
		sh.mu.Unlock()
	}
	if n := s.total.n.Load(); n != total || n > s.maxKeys {
		t.Errorf("store counts %d counters, lease sets and hold records, holds %d, cap %d", n, total, s.maxKeys)
	}
	s.tenantsMu.RLock()
	defer s.tenantsMu.RUnlock()
	for name, b := range s.tenants {
		if n := b.n.Load(); n != counts[b] || n > s.perTenant {
			t.Errorf("tenant %q counts %d counters, lease sets and hold records, holds %d, budget %d", name, n, counts[b], s.perTenant)
		}
		delete(counts, b)
	}
	if len(counts) > 0 {
		t.Errorf("%d budgets no longer in the table still count something", len(counts))
	}
}

// Checks and leases of many tenants, releases, sweeps and resets at once,
// with time moving: the budgets stay exact.
func TestBookkeepingUnderChurn(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1_800_000_000_000)
	s := New(Options{
		Clock:            func() time.Time { return time.UnixMilli(clock.Load()) },
		MaxKeys:          300,
		MaxKeysPerTenant: 120,
		SweepInterval:    time.Millisecond,
	})
	defer s.Close()
	limits := []sluice.Limit{sluice.TokenBucket(3, 10).Named("b"), sluice.FixedWindow(2, 50*time.Millisecond).Named("w")}
	leased := []sluice.Limit{sluice.Concurrency(2, 30*time.Millisecond).Named("c")}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			tenant := strconv.Itoa(w % 4)
			for i := 0; i < 3000; i++ {
				subject := strconv.Itoa(i % 400)
				switch {
				case i%97 == 0:
					if err := s.Reset(ctx, tenant, "r", subject, limits); err != nil {
						t.Error(err)
						return
					}
				case i%13 == 0:
					s.Sweep()
				case i%5 == 0:
					// A lease, released every other time: lease sets and
					// hold records come and go beside the counters.
					d, err := s.Check(ctx, sluice.Request{Tenant: tenant, Rule: "l", Subject: subject, Limits: leased, Cost: 1})
					if err != nil && !errors.Is(err, ErrBudgetExhausted) {
						t.Error(err)
						return
					}
					if err == nil && d.Hold != nil && i%2 == 0 {
						if _, err := s.Hold(ctx, sluice.HoldOp{Tenant: tenant, ID: d.Hold.ID, Action: sluice.HoldRelease}); err != nil {
							t.Error(err)
							return
						}
					}
				default:
					_, err := s.Check(ctx, sluice.Request{Tenant: tenant, Rule: "r", Subject: subject, Limits: limits, Cost: 1})
					if err != nil && !errors.Is(err, ErrBudgetExhausted) {
						t.Error(err)
						return
					}
				}
				if i%50 == 0 {
					clock.Add(7)
				}
			}
		}()
	}
	wg.Wait()
	s.Close() // soonest is only a bound between sweeps: stop the sweeper to look
	checkBookkeeping(t, s)
	if s.Stats().Refused == 0 {
		t.Error("the churn never reached a budget; make it smaller")
	}
	clock.Add(time.Hour.Milliseconds())
	s.Sweep()
	checkBookkeeping(t, s)
	if st := s.Stats(); st.Keys != 0 || st.Tenants != 0 {
		t.Errorf("after everything is back to full and swept: %+v", st)
	}
}
