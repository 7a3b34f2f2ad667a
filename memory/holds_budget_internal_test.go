package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// liveState describes what the store holds that is still in force at now:
// counters not expired, leases not expired, hold records not forgotten.
// What is past its time may be dropped by any check or sweep, so it is left
// out; everything else must be untouched by a refused check.
func liveState(s *Store, now int64) string {
	var lines []string
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, e := range sh.entries {
			if e.expireAt > now {
				lines = append(lines, fmt.Sprintf("counter %q %+v", key, e.state))
			}
		}
		for key, set := range sh.leases {
			for nonce, ls := range set.leases {
				if ls.expireAt > now {
					lines = append(lines, fmt.Sprintf("lease %q %s %+v", key, nonce, ls))
				}
			}
		}
		for key, rec := range sh.holds {
			if rec.forgetAt() > now {
				lines = append(lines, fmt.Sprintf("hold %q expires %d done %v", key, rec.expireAt, rec.done))
			}
		}
		sh.mu.Unlock()
	}
	slices.Sort(lines)
	return fmt.Sprint(lines)
}

// Random sequences of reservations, leases, settles, releases, extends,
// resets, sweeps and clock moves over a few tenants with small budgets: after
// every step the budgets count exactly the counters, lease sets and hold
// records held, and a check refused for room changed nothing in force.
func TestHoldsBookkeepingRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	nowMs := int64(1_800_000_000_000)
	s := New(Options{
		Clock:            func() time.Time { return time.UnixMilli(nowMs) },
		MaxKeys:          40,
		MaxKeysPerTenant: 16,
		SweepInterval:    time.Hour, // sweeps are steps of the sequence
	})
	defer s.Close()
	ctx := context.Background()
	limitSets := [][]sluice.Limit{
		{sluice.TokenBucket(20, 2).Named("b")},
		{sluice.Concurrency(3, 4*time.Second).Named("c")},
		{sluice.SlidingWindow(10, 5*time.Second).Named("w"), sluice.Concurrency(2, 3*time.Second).Named("c")},
		{sluice.FixedWindow(8, 3*time.Second).Named("f"), sluice.TokenBucket(5, 1).Named("b")},
	}
	type held struct{ tenant, id string }
	var holds []held
	refused, allowed := 0, 0
	for step := 0; step < 4000; step++ {
		tenant := strconv.Itoa(rng.IntN(3))
		switch op := rng.IntN(20); {
		case op < 11:
			li := rng.IntN(len(limitSets))
			req := sluice.Request{
				Tenant:  tenant,
				Rule:    "r" + strconv.Itoa(li),
				Subject: strconv.Itoa(rng.IntN(8)),
				Limits:  limitSets[li],
				Cost:    int64(rng.IntN(3)),
				Reserve: rng.IntN(2) == 0,
			}
			if req.Reserve {
				req.HoldTTL = time.Duration(1+rng.IntN(4)) * time.Second
			}
			before := liveState(s, nowMs)
			d, err := s.Check(ctx, req)
			switch {
			case errors.Is(err, ErrBudgetExhausted):
				refused++
				if after := liveState(s, nowMs); after != before {
					t.Fatalf("step %d: a refused check of %+v changed the store:\nbefore %s\nafter  %s", step, req, before, after)
				}
			case err != nil:
				t.Fatalf("step %d: %v", step, err)
			case d.Hold != nil:
				allowed++
				holds = append(holds, held{tenant, d.Hold.ID})
			}
		case op < 16 && len(holds) > 0:
			h := holds[rng.IntN(len(holds))]
			action := []sluice.HoldAction{sluice.HoldSettle, sluice.HoldRelease, sluice.HoldExtend}[rng.IntN(3)]
			hop := sluice.HoldOp{Tenant: h.tenant, ID: h.id, Action: action}
			if action == sluice.HoldSettle {
				hop.Cost = int64(rng.IntN(4))
			}
			_, err := s.Hold(ctx, hop)
			if err != nil && !errors.Is(err, ErrBudgetExhausted) {
				t.Fatalf("step %d: %s %s: %v", step, action, h.id, err)
			}
		case op < 17:
			s.Sweep()
		case op < 18:
			li := rng.IntN(len(limitSets))
			if err := s.Reset(ctx, tenant, "r"+strconv.Itoa(li), strconv.Itoa(rng.IntN(8)), limitSets[li]); err != nil {
				t.Fatal(err)
			}
		default:
			nowMs += rng.Int64N(1500)
		}
		checkBookkeeping(t, s)
		if t.Failed() {
			t.Fatalf("after step %d", step)
		}
	}
	if refused == 0 || allowed == 0 {
		t.Fatalf("%d holds taken, %d refused: the sequence must reach the budgets and get past them", allowed, refused)
	}
	// Long after everything ended, a sweep gives all the room back.
	nowMs += time.Hour.Milliseconds()
	s.Sweep()
	checkBookkeeping(t, s)
	if st := s.Stats(); st.Keys != 0 || st.Tenants != 0 {
		s.tenantsMu.RLock()
		t.Errorf("after everything ended and was swept: %+v, tenants %v", st, slices.Collect(maps.Keys(s.tenants)))
		s.tenantsMu.RUnlock()
	}
}
