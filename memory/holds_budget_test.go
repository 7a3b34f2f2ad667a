package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
)

// hold checks req and returns the hold it took, failing unless allowed.
func hold(t *testing.T, store *memory.Store, req sluice.Request) string {
	t.Helper()
	d, err := store.Check(context.Background(), req)
	if err != nil || !d.Allowed || d.Hold == nil {
		t.Fatalf("%s's hold on %s: %+v, %v; want allowed with a hold", req.Tenant, req.Subject, d, err)
	}
	return d.Hold.ID
}

// refusedForRoom checks req, which must be refused with tenant's budget of
// budget named.
func refusedForRoom(t *testing.T, store *memory.Store, req sluice.Request, budget int) {
	t.Helper()
	_, err := store.Check(context.Background(), req)
	if be := budgetError(t, err); be.Tenant != req.Tenant || be.Budget != budget || be.Store {
		t.Fatalf("refusal of %s's hold on %s names the wrong budget: %+v", req.Tenant, req.Subject, be)
	}
}

// peek returns the remaining figure of req's limits, consuming nothing.
func peek(t *testing.T, store *memory.Store, req sluice.Request) int64 {
	t.Helper()
	req.Cost, req.Reserve = 0, false
	d, err := store.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// Reservations and lease sets take room like counters: a tenant at its
// budget can neither reserve nor take a lease set, the refusal takes nothing,
// and another tenant still can.
func TestHoldsTakeBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		// req is a hold on subject i; each takes room for a hold record,
		// plus the first on a subject for its counter or lease set.
		req func(tenant string, i int) sluice.Request
	}{
		{"reserve", func(tenant string, i int) sluice.Request {
			return sluice.Request{Tenant: tenant, Rule: "r", Subject: "s", Cost: 1, Reserve: true, HoldTTL: time.Hour,
				Limits: []sluice.Limit{sluice.TokenBucket(100, 1.0/3600).Named("tokens")}}
		}},
		{"lease", func(tenant string, i int) sluice.Request {
			return sluice.Request{Tenant: tenant, Rule: "r", Subject: "s" + strconv.Itoa(i/3), Cost: 1,
				Limits: []sluice.Limit{sluice.Concurrency(10, time.Hour).Named("streams")}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			store := memory.New(clock.opts(memory.Options{MaxKeys: 100, MaxKeysPerTenant: 6}))
			defer store.Close()
			// reserve: a counter and five records. lease: two lease sets
			// (s0, s1) and four records.
			for i := 0; store.Len() < 6; i++ {
				if i == 6 {
					t.Fatalf("six holds take room for %d, want 6", store.Len())
				}
				hold(t, store, tc.req("a", i))
			}
			if store.Len() != 6 {
				t.Fatalf("a holds %d, want its budget of 6 exactly", store.Len())
			}
			// Neither another hold on a subject a holds nor one on a new
			// subject finds room.
			for _, req := range []sluice.Request{tc.req("a", 0), tc.req("a", 9)} {
				before := peek(t, store, req)
				refusedForRoom(t, store, req, 6)
				if after := peek(t, store, req); after != before {
					t.Fatalf("a refused hold on %s took something: remaining %d, then %d", req.Subject, before, after)
				}
			}
			if n := store.Len(); n != 6 {
				t.Fatalf("refusals changed the store: %d held, want 6", n)
			}
			// b's budget is its own.
			hold(t, store, tc.req("b", 0))
			if st := store.Stats(); st.Refused != 2 || st.Keys != 8 || st.Tenants != 2 {
				t.Fatalf("stats %+v; want 2 refused, 8 held, 2 tenants", st)
			}
		})
	}
}

// The store's cap counts holds too.
func TestHoldsTakeStoreRoom(t *testing.T) {
	clock := newTestClock()
	store := memory.New(clock.opts(memory.Options{MaxKeys: 4, MaxKeysPerTenant: 4}))
	defer store.Close()
	lease := func(tenant string) sluice.Request {
		return sluice.Request{Tenant: tenant, Rule: "r", Subject: "s", Cost: 1,
			Limits: []sluice.Limit{sluice.Concurrency(10, time.Hour).Named("streams")}}
	}
	hold(t, store, lease("a"))
	hold(t, store, lease("b"))
	_, err := store.Check(context.Background(), lease("c"))
	if be := budgetError(t, err); !be.Store || be.Budget != 4 {
		t.Fatalf("want the store's cap named, got %+v", be)
	}
}

// Room comes back when holds are dropped: a released lease set at once, a
// settled or released record once forgotten (its TTL after it ends), and the
// leases and records of crashed holders once the sweep finds them past their
// time.
func TestHoldsGiveBudgetBack(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	streams := []sluice.Limit{sluice.Concurrency(10, ttl).Named("streams")}
	lease := func(subject string) sluice.Request {
		return sluice.Request{Tenant: "a", Rule: "r", Subject: subject, Cost: 1, Limits: streams}
	}
	reserve := sluice.Request{Tenant: "a", Rule: "r", Subject: "s", Cost: 2, Reserve: true, HoldTTL: ttl,
		Limits: []sluice.Limit{sluice.SlidingWindow(100, time.Hour).Named("tokens")}}
	finish := func(t *testing.T, store *memory.Store, id string, action sluice.HoldAction) {
		t.Helper()
		op := sluice.HoldOp{Tenant: "a", ID: id, Action: action}
		if action == sluice.HoldSettle {
			op.Cost = 1
		}
		if res, err := store.Hold(ctx, op); err != nil || res.Status == sluice.HoldUnknown || res.Status == sluice.HoldExpired {
			t.Fatalf("%s %s: %+v, %v", action, id, res, err)
		}
	}
	newStore := func(t *testing.T) (*memory.Store, *testClock) {
		clock := newTestClock()
		store := memory.New(clock.opts(memory.Options{MaxKeys: 100, MaxKeysPerTenant: 4}))
		t.Cleanup(func() { store.Close() })
		return store, clock
	}

	t.Run("settled reservations once forgotten", func(t *testing.T) {
		store, clock := newStore(t)
		var ids []string
		for len(ids) < 3 { // the window's counter and three records
			ids = append(ids, hold(t, store, reserve))
		}
		refusedForRoom(t, store, reserve, 4)
		for _, id := range ids {
			finish(t, store, id, sluice.HoldSettle)
		}
		store.Sweep()
		refusedForRoom(t, store, reserve, 4) // settled, not yet forgotten
		clock.advance(2 * ttl)               // the records' TTL, and as much again
		store.Sweep()
		if n := store.Len(); n != 1 {
			t.Fatalf("after the records were forgotten %d held, want the window's counter alone", n)
		}
		hold(t, store, reserve)
	})

	t.Run("released leases at once", func(t *testing.T) {
		store, _ := newStore(t)
		s0 := hold(t, store, lease("s0"))
		hold(t, store, lease("s1"))
		refusedForRoom(t, store, lease("s1"), 4) // a second record
		finish(t, store, s0, sluice.HoldRelease)
		if n := store.Len(); n != 3 {
			t.Fatalf("after s0's only lease was released %d held, want 3 (its record is kept a TTL)", n)
		}
		hold(t, store, lease("s1"))
	})

	t.Run("crashed holders after the sweep", func(t *testing.T) {
		store, clock := newStore(t)
		hold(t, store, lease("s0"))
		hold(t, store, lease("s1"))
		clock.advance(ttl) // the leases expire, unreleased
		refusedForRoom(t, store, lease("s2"), 4)
		clock.advance(ttl) // past the sweeper's grace and the records' memory
		store.Sweep()
		if st := store.Stats(); st.Keys != 0 || st.Tenants != 0 {
			t.Fatalf("after the crashed holders were swept: %+v; want nothing held", st)
		}
		hold(t, store, lease("s2"))
	})
}
