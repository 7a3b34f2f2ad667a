package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
)

// RunLeases runs the conformance cases of leases (see sluice.Leaser)
// against the store newStore returns. Every subtest uses its own tenant.
func RunLeases(t *testing.T, newStore func(t *testing.T) sluice.Leaser) {
	store := newStore(t)
	ctx := context.Background()
	lease := func(t *testing.T, limits []sluice.Limit, holder string, want, atMs int64) sluice.LeaseGrant {
		t.Helper()
		g, err := store.Lease(ctx, sluice.LeaseRequest{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits,
			Holder: holder, Want: want, TTL: 5 * time.Second, Now: at(atMs)})
		if err != nil {
			t.Fatalf("lease of %d for %s at t=%dms: %v", want, holder, atMs, err)
		}
		if g.Decision.Allowed != (g.Granted > 0) || g.Decision.Allowed != (g.ID != "") || g.Decision.Hold != nil {
			t.Fatalf("lease at t=%dms: inconsistent grant %+v", atMs, g)
		}
		return g
	}
	granted := func(t *testing.T, g sluice.LeaseGrant, units, remaining int64) {
		t.Helper()
		if g.Granted != units || g.Decision.Remaining != remaining {
			t.Fatalf("granted %d, remaining %d (%v); want %d and %d", g.Granted, g.Decision.Remaining, g.Decision, units, remaining)
		}
	}
	giveBack := func(t *testing.T, id string, unused, atMs int64, status sluice.LeaseStatus) {
		t.Helper()
		res, err := store.ReturnLease(ctx, sluice.LeaseReturn{Tenant: t.Name(), ID: id, Unused: unused, Now: at(atMs)})
		if err != nil {
			t.Fatalf("return of %d at t=%dms: %v", unused, atMs, err)
		}
		if res.Status != status {
			t.Fatalf("return of %d at t=%dms: status %q, want %q", unused, atMs, res.Status, status)
		}
		if returned := status == sluice.LeaseReturned; returned != (res.Granted > 0) || returned && res.Granted < unused {
			t.Fatalf("return of %d at t=%dms (%s) says the lease granted %d", unused, atMs, status, res.Granted)
		}
		if status != sluice.LeaseUnknown && (res.Rule != "r" || res.Subject != "s") {
			t.Fatalf("return names rule %q subject %q, want r and s", res.Rule, res.Subject)
		}
	}
	remaining := func(t *testing.T, limits []sluice.Limit, atMs, want int64) {
		t.Helper()
		d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Now: at(atMs)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining != want {
			t.Fatalf("a peek at t=%dms sees %d remaining, want %d (%v)", atMs, d.Remaining, want, d)
		}
	}
	fixed := []sluice.Limit{sluice.FixedWindow(10, time.Second).Named("f")}
	sliding := []sluice.Limit{sluice.SlidingWindow(10, time.Second).Named("s")}
	bucket := []sluice.Limit{sluice.TokenBucket(10, 1).Named("b")}

	t.Run("grant_consumes_what_it_grants", func(t *testing.T) {
		for _, limits := range [][]sluice.Limit{fixed, sliding, bucket} {
			t.Run(string(limits[0].Algorithm), func(t *testing.T) {
				g := lease(t, limits, "h1", 4, 0)
				granted(t, g, 4, 6)
				if g.ExpiresIn != 5*time.Second {
					t.Fatalf("expires in %v, want 5s", g.ExpiresIn)
				}
				remaining(t, limits, 0, 6)
			})
		}
	})
	t.Run("use_nothing_then_return_gives_everything_back", func(t *testing.T) {
		for _, limits := range [][]sluice.Limit{fixed, sliding, bucket} {
			t.Run(string(limits[0].Algorithm), func(t *testing.T) {
				g := lease(t, limits, "h1", 4, 0)
				giveBack(t, g.ID, 4, 10, sluice.LeaseReturned)
				remaining(t, limits, 10, 10)
				giveBack(t, g.ID, 4, 20, sluice.LeaseFinished)
				remaining(t, limits, 20, 10)
			})
		}
	})
	t.Run("partial_return_gives_back_the_unused_units", func(t *testing.T) {
		for _, limits := range [][]sluice.Limit{fixed, sliding, bucket} {
			t.Run(string(limits[0].Algorithm), func(t *testing.T) {
				g := lease(t, limits, "h1", 4, 0)
				giveBack(t, g.ID, 1, 10, sluice.LeaseReturned)
				remaining(t, limits, 10, 7)
			})
		}
	})
	t.Run("a_token_bucket_takes_units_back_only_up_to_capacity", func(t *testing.T) {
		g := lease(t, bucket, "h1", 4, 0)
		// 3 s later 3 tokens are back: 9; four more would make 13.
		giveBack(t, g.ID, 4, 3000, sluice.LeaseReturned)
		remaining(t, bucket, 3000, 10)
	})
	t.Run("units_returned_after_their_window_ended_are_gone", func(t *testing.T) {
		t.Run("fixed_window", func(t *testing.T) {
			g := lease(t, fixed, "h1", 4, 500)
			giveBack(t, g.ID, 4, 1200, sluice.LeaseReturned)
			remaining(t, fixed, 1200, 10) // a fresh window, not 14
			g = lease(t, fixed, "h1", 10, 1300)
			granted(t, g, 10, 0)
		})
		t.Run("sliding_window_while_the_previous_window_counts", func(t *testing.T) {
			g := lease(t, sliding, "h1", 8, 500)
			// At 1500 the previous window's 8 count for half: 6 left.
			remaining(t, sliding, 1500, 6)
			giveBack(t, g.ID, 8, 1500, sluice.LeaseReturned)
			remaining(t, sliding, 1500, 10)
		})
		t.Run("sliding_window_once_it_no_longer_counts", func(t *testing.T) {
			g := lease(t, sliding, "h1", 8, 500)
			giveBack(t, g.ID, 8, 2100, sluice.LeaseReturned)
			remaining(t, sliding, 2100, 10)
			granted(t, lease(t, sliding, "h1", 10, 2100), 10, 0)
		})
	})
	renew := func(t *testing.T, limits []sluice.Limit, old string, unused, want, atMs int64) (sluice.LeaseGrant, error) {
		t.Helper()
		return store.Lease(ctx, sluice.LeaseRequest{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits,
			Holder: "h1", Want: want, TTL: 5 * time.Second, Renew: old, RenewUnused: unused, Now: at(atMs)})
	}
	t.Run("a_renew_returns_the_old_lease_then_grants", func(t *testing.T) {
		for _, limits := range [][]sluice.Limit{fixed, sliding, bucket} {
			t.Run(string(limits[0].Algorithm), func(t *testing.T) {
				old := lease(t, limits, "h1", 10, 0)
				granted(t, old, 10, 0)
				// The 3 unused units go back first, so this very call
				// can grant them again.
				g, err := renew(t, limits, old.ID, 3, 5, 0)
				if err != nil {
					t.Fatal(err)
				}
				if g.Returned != sluice.LeaseReturned || g.ReturnedGranted != 10 || g.ID == "" || g.ID == old.ID {
					t.Fatalf("renew %+v; want the old lease returned and a new one", g)
				}
				granted(t, g, 3, 0)
				// The old lease is finished; the new one returns.
				g2, err := renew(t, limits, old.ID, 3, 5, 1)
				if err != nil || g2.Returned != sluice.LeaseFinished || g2.Granted != 0 {
					t.Fatalf("second renew of the old lease %+v, %v; want it finished and a deny", g2, err)
				}
				giveBack(t, g.ID, 3, 2, sluice.LeaseReturned)
				remaining(t, limits, 2, 3)
			})
		}
	})
	t.Run("units_returned_after_a_reset_are_gone", func(t *testing.T) {
		// The reset gave the lease's units back already: returning them
		// must not lower the fresh count (over-admission).
		for _, limits := range [][]sluice.Limit{fixed, sliding, bucket} {
			t.Run(string(limits[0].Algorithm), func(t *testing.T) {
				reset := func() {
					if err := store.Reset(ctx, t.Name(), "r", "s", limits); err != nil {
						t.Fatal(err)
					}
				}
				g := lease(t, limits, "h1", 10, 0)
				granted(t, g, 10, 0)
				reset()
				fresh := lease(t, limits, "h1", 10, 1)
				granted(t, fresh, 10, 0)
				giveBack(t, g.ID, 10, 2, sluice.LeaseReturned)
				remaining(t, limits, 2, 0)
				// A renew's return of a lease from before a reset, too.
				reset()
				granted(t, lease(t, limits, "h1", 6, 3), 6, 4)
				r, err := renew(t, limits, fresh.ID, 10, 4, 4)
				if err != nil || r.Returned != sluice.LeaseReturned || r.ReturnedGranted != 10 {
					t.Fatalf("renew across a reset %+v, %v; want the old lease returned", r, err)
				}
				granted(t, r, 4, 0)
			})
		}
	})
	t.Run("a_renew_that_gives_back_too_much_changes_nothing", func(t *testing.T) {
		old := lease(t, fixed, "h1", 4, 0)
		for name, r := range map[string]struct {
			id     string
			unused int64
		}{
			"more_than_granted": {old.ID, 5},
			"negative":          {old.ID, -1},
			"malformed_id":      {"nope", 1},
			"no_id":             {"", 1},
			"another_subject":   {sluice.NewHoldID(t.Name(), "r", "other"), 1},
		} {
			if g, err := renew(t, fixed, r.id, r.unused, 4, 1); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("%s: got %+v, %v; want ErrInvalid", name, g, err)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}
		remaining(t, fixed, 1, 6)
		giveBack(t, old.ID, 4, 2, sluice.LeaseReturned)
	})
	t.Run("a_renew_at_the_limit_returns_and_is_denied_from_the_stores_state", func(t *testing.T) {
		old := lease(t, fixed, "h1", 10, 0)
		g, err := renew(t, fixed, old.ID, 0, 10, 300)
		if err != nil || g.Granted != 0 || g.Decision.Allowed || g.Decision.RetryAfter != 700*time.Millisecond {
			t.Fatalf("renew %+v, %v; want a deny retrying in 700ms", g, err)
		}
		if g.Returned != sluice.LeaseReturned {
			t.Fatalf("the old lease %q, want returned", g.Returned)
		}
	})
	t.Run("a_lease_not_returned_by_its_ttl_keeps_its_units", func(t *testing.T) {
		g, err := store.Lease(ctx, sluice.LeaseRequest{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: fixed,
			Holder: "h1", Want: 4, TTL: 100 * time.Millisecond, Now: at(0)})
		if err != nil || g.Granted != 4 {
			t.Fatalf("grant %+v, %v", g, err)
		}
		giveBack(t, g.ID, 4, 100, sluice.LeaseExpired)
		remaining(t, fixed, 100, 6)
		giveBack(t, g.ID, 4, 199, sluice.LeaseExpired)
		giveBack(t, g.ID, 4, 200, sluice.LeaseUnknown) // forgotten a TTL on
	})
	t.Run("two_holders_share_what_is_left_in_proportion_to_demand", func(t *testing.T) {
		limits := []sluice.Limit{sluice.FixedWindow(100, 10*time.Second).Named("f")}
		// Alone, a holder gets what it wants.
		granted(t, lease(t, limits, "a", 30, 0), 30, 70)
		// Together they want 120 of 70: b gets 70*90/120.
		granted(t, lease(t, limits, "b", 90, 1), 52, 18)
		// a asks again: 18*30/120.
		granted(t, lease(t, limits, "a", 30, 2), 4, 14)
		// b lowers its demand to 10: 40 wanted of 14, b gets 14*10/40.
		granted(t, lease(t, limits, "b", 10, 3), 3, 11)
		// Past the TTL (5 s) b's demand no longer counts.
		granted(t, lease(t, limits, "a", 30, 5003), 11, 0)
	})
	t.Run("every_call_that_finds_a_unit_left_gets_one", func(t *testing.T) {
		limits := []sluice.Limit{sluice.FixedWindow(4, 10*time.Second).Named("f")}
		g := lease(t, limits, "a", 4, 0)
		giveBack(t, g.ID, 3, 1, sluice.LeaseReturned)
		// 5 wanted of 3 left: b's share 3*1/5 rounds to 0, but a unit is
		// left, so b gets one; then a gets 2*4/5.
		granted(t, lease(t, limits, "b", 1, 2), 1, 2)
		granted(t, lease(t, limits, "a", 4, 3), 1, 1)
		granted(t, lease(t, limits, "b", 1, 4), 1, 0)
	})
	t.Run("a_grant_when_nothing_is_left_answers_a_check_of_one_denied", func(t *testing.T) {
		for _, limits := range [][]sluice.Limit{fixed, sliding, bucket} {
			t.Run(string(limits[0].Algorithm), func(t *testing.T) {
				granted(t, lease(t, limits, "h1", 10, 0), 10, 0)
				g := lease(t, limits, "h2", 5, 300)
				d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Cost: 1, Now: at(300)})
				if err != nil {
					t.Fatal(err)
				}
				if g.Granted != 0 || g.ID != "" || g.Decision.Allowed || d.Allowed {
					t.Fatalf("grant %+v, check %v; want both denied", g, d)
				}
				if diff := CompareDecisions(d, g.Decision); diff != "" {
					t.Fatalf("the lease's deny is not a check of cost 1's: %s", diff)
				}
				// Exact: a unit is back at the retry, not a ms before.
				retry := g.Decision.RetryAfter.Milliseconds()
				if early := lease(t, limits, "h2", 5, 300+retry-1); early.Granted != 0 {
					t.Fatalf("granted %d a ms before the retry_after of %dms", early.Granted, retry)
				}
				if late := lease(t, limits, "h2", 5, 300+retry); late.Granted < 1 {
					t.Fatalf("nothing granted at the retry_after of %dms: %v", retry, late.Decision)
				}
			})
		}
		want := map[sluice.Algorithm]time.Duration{sluice.AlgorithmFixedWindow: 700 * time.Millisecond,
			sluice.AlgorithmTokenBucket: 700 * time.Millisecond}
		for algo, retry := range want {
			limits := fixed
			if algo == sluice.AlgorithmTokenBucket {
				limits = bucket
			}
			t.Run("retry_of_"+string(algo), func(t *testing.T) {
				lease(t, limits, "h1", 10, 0)
				if g := lease(t, limits, "h1", 1, 300); g.Decision.RetryAfter != retry {
					t.Fatalf("retry after %v, want %v", g.Decision.RetryAfter, retry)
				}
			})
		}
	})
	t.Run("all_or_nothing_across_two_limits", func(t *testing.T) {
		limits := []sluice.Limit{sluice.FixedWindow(10, time.Second).Named("f"), sluice.TokenBucket(5, 1).Named("b")}
		if d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Cost: 2, Now: at(0)}); err != nil || !d.Allowed {
			t.Fatalf("check %v, %v", d, err)
		}
		// 8 left in the window, 3 in the bucket: 3 of both.
		g := lease(t, limits, "h1", 5, 0)
		if g.Granted != 3 || g.Decision.Limits[0].Remaining != 5 || g.Decision.Limits[1].Remaining != 0 {
			t.Fatalf("grant %+v; want 3 of both, 5 and 0 left", g)
		}
		// The bucket is empty: denied, and the window loses nothing.
		if g := lease(t, limits, "h1", 5, 100); g.Granted != 0 || g.Decision.RetryAfter != 900*time.Millisecond {
			t.Fatalf("grant %+v; want a deny with retry 900ms", g)
		}
		remaining(t, limits[:1], 100, 5)
		// Returning gives back to both.
		giveBack(t, g.ID, 2, 100, sluice.LeaseReturned)
		d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Now: at(100)})
		if err != nil || d.Limits[0].Remaining != 7 || d.Limits[1].Remaining != 2 {
			t.Fatalf("after the return %v, %v; want 7 and 2 left", d.Limits, err)
		}
	})
	t.Run("another_tenants_lease_is_unknown", func(t *testing.T) {
		g := lease(t, fixed, "h1", 4, 0)
		res, err := store.ReturnLease(ctx, sluice.LeaseReturn{Tenant: t.Name() + "-other", ID: g.ID, Unused: 4, Now: at(1)})
		if err != nil || res.Status != sluice.LeaseUnknown {
			t.Fatalf("got %+v, %v; want unknown", res, err)
		}
		remaining(t, fixed, 1, 6)
	})
	t.Run("on_the_stores_clock", func(t *testing.T) {
		g, err := store.Lease(ctx, sluice.LeaseRequest{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: bucket, Holder: "h1", Want: 4, TTL: time.Minute})
		if err != nil || g.Granted != 4 {
			t.Fatalf("grant %+v, %v", g, err)
		}
		res, err := store.ReturnLease(ctx, sluice.LeaseReturn{Tenant: t.Name(), ID: g.ID, Unused: 3})
		if err != nil || res.Status != sluice.LeaseReturned {
			t.Fatalf("return %+v, %v", res, err)
		}
	})
	t.Run("invalid_input_is_refused_in_a_sentence_and_changes_nothing", func(t *testing.T) {
		base := sluice.LeaseRequest{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: fixed, Holder: "h1", Want: 4, TTL: time.Second, Now: at(0)}
		for name, mutate := range map[string]func(*sluice.LeaseRequest){
			"concurrency_limit": func(r *sluice.LeaseRequest) {
				r.Limits = []sluice.Limit{fixed[0], sluice.Concurrency(5, time.Second).Named("c")}
			},
			"no_holder":          func(r *sluice.LeaseRequest) { r.Holder = "" },
			"holder_with_space":  func(r *sluice.LeaseRequest) { r.Holder = "h 1" },
			"want_zero":          func(r *sluice.LeaseRequest) { r.Want = 0 },
			"want_past_capacity": func(r *sluice.LeaseRequest) { r.Want = 11 },
			"no_ttl":             func(r *sluice.LeaseRequest) { r.TTL = 0 },
			"no_limits":          func(r *sluice.LeaseRequest) { r.Limits = nil },
		} {
			req := base
			mutate(&req)
			if _, err := store.Lease(ctx, req); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", name, err)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}
		remaining(t, fixed, 0, 10)
		g := lease(t, fixed, "h1", 4, 0)
		for name, ret := range map[string]sluice.LeaseReturn{
			"negative":          {Tenant: t.Name(), ID: g.ID, Unused: -1, Now: at(1)},
			"more_than_granted": {Tenant: t.Name(), ID: g.ID, Unused: 5, Now: at(1)},
			"malformed_id":      {Tenant: t.Name(), ID: "nope", Unused: 1, Now: at(1)},
		} {
			if _, err := store.ReturnLease(ctx, ret); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", name, err)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}
		remaining(t, fixed, 1, 6)
		giveBack(t, g.ID, 4, 2, sluice.LeaseReturned)
		remaining(t, fixed, 2, 10)
	})
}

// LeasesMatchModel runs rounds of rapid's random sequences of checks, lease
// grants by three holders and returns (some too large, some late) on two
// subjects, and requires every store's answers to be the model's.
func LeasesMatchModel(t *testing.T, stores map[string]sluice.Leaser, rounds int) {
	for range rounds {
		leasesMatchModel(t, stores)
	}
}

func leasesMatchModel(t *testing.T, stores map[string]sluice.Leaser) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		limits := DrawSmallLimits(rt)
		minCapacity := smallest(limits)
		model := NewModel()
		tenant := fmt.Sprintf("leaseprop-%d", time.Now().UnixNano())
		now := Base.Add(time.Duration(rapid.Int64Range(0, 100_000).Draw(rt, "start")) * time.Millisecond)
		type granted struct {
			model   string
			store   map[string]string
			units   int64
			subject string
		}
		var grants []granted
		steps := rapid.IntRange(10, 80).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			now = now.Add(time.Duration(rapid.SampledFrom([]int64{0, 0, 1, 7, 49, 50, 51, 300, 500, 999, 1000, 1001, 2000, 6000}).Draw(rt, "step")) * time.Millisecond)
			subject := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "subject")
			op := rapid.IntRange(0, 3).Draw(rt, "op")
			var renewed *granted
			if op == 3 {
				// A renew of a lease of this subject, when there is one.
				for j := len(grants) - 1; j >= 0; j-- {
					if grants[j].subject == subject {
						renewed = &grants[j]
						break
					}
				}
				if renewed == nil {
					op = 1
				}
			}
			switch op {
			case 0:
				req := sluice.Request{Tenant: tenant, Rule: "r", Subject: subject, Limits: limits,
					Cost: rapid.Int64Range(0, minCapacity).Draw(rt, "cost"), Now: now}
				want := model.Check(req)
				for name, s := range stores {
					got, err := s.Check(ctx, req)
					if err != nil {
						rt.Fatalf("step %d: %s check: %v", i, name, err)
					}
					if diff := CompareDecisions(want, got); diff != "" {
						rt.Fatalf("step %d: %s check at +%dms cost %d: %s", i, name, now.Sub(Base).Milliseconds(), req.Cost, diff)
					}
				}
			case 1, 3:
				req := sluice.LeaseRequest{Tenant: tenant, Rule: "r", Subject: subject, Limits: limits,
					Holder: rapid.SampledFrom([]string{"h1", "h2", "h3"}).Draw(rt, "holder"),
					Want:   rapid.Int64Range(1, minCapacity).Draw(rt, "want"),
					TTL:    time.Duration(rapid.SampledFrom([]int{50, 1000, 5000}).Draw(rt, "ttl")) * time.Millisecond, Now: now}
				mreq := req
				if renewed != nil {
					// Some give back one more than granted: refused.
					req.RenewUnused = rapid.Int64Range(0, renewed.units+1).Draw(rt, "renew unused")
					mreq.Renew, mreq.RenewUnused = renewed.model, req.RenewUnused
				}
				want, wantErr := model.Lease(mreq)
				g := granted{model: want.ID, store: map[string]string{}, units: want.Granted, subject: subject}
				for name, s := range stores {
					if renewed != nil {
						req.Renew = renewed.store[name]
					}
					got, err := s.Lease(ctx, req)
					if wantErr != nil {
						if !errors.Is(err, sluice.ErrInvalid) {
							rt.Fatalf("step %d: %s renew giving back %d of %d: got %+v, %v; model %v", i, name, req.RenewUnused, renewed.units, got, err, wantErr)
						}
						continue
					}
					if err != nil {
						rt.Fatalf("step %d: %s lease: %v", i, name, err)
					}
					if got.Returned != want.Returned || got.ReturnedGranted != want.ReturnedGranted {
						rt.Fatalf("step %d: %s renew giving back %d of %d at +%dms: old lease %q (granted %d), model %q (%d)", i, name, req.RenewUnused, renewed.units, now.Sub(Base).Milliseconds(), got.Returned, got.ReturnedGranted, want.Returned, want.ReturnedGranted)
					}
					if diff := CompareDecisions(want.Decision, got.Decision); diff != "" || got.Granted != want.Granted || got.ExpiresIn != want.ExpiresIn || (got.ID == "") != (want.ID == "") {
						rt.Fatalf("step %d: %s lease of %d for %s at +%dms: granted %d, model %d; %s\nmodel: %v\nstore: %v",
							i, name, req.Want, req.Holder, now.Sub(Base).Milliseconds(), got.Granted, want.Granted, diff, want.Decision, got.Decision)
					}
					g.store[name] = got.ID
				}
				if g.model != "" {
					grants = append(grants, g)
				}
			default:
				if len(grants) == 0 {
					continue
				}
				g := grants[max(0, len(grants)-1-rapid.IntRange(0, len(grants)-1).Draw(rt, "which lease"))]
				ret := sluice.LeaseReturn{Tenant: tenant, Unused: rapid.Int64Range(0, g.units+1).Draw(rt, "unused"), Now: now}
				mret := ret
				mret.ID = g.model
				want, wantErr := model.ReturnLease(mret)
				for name, s := range stores {
					ret.ID = g.store[name]
					got, err := s.ReturnLease(ctx, ret)
					if (err != nil) != (wantErr != nil) || (err != nil && !errors.Is(err, sluice.ErrInvalid)) {
						rt.Fatalf("step %d: %s return of %d: error %v, model %v", i, name, ret.Unused, err, wantErr)
					}
					if got != want {
						rt.Fatalf("step %d: %s return of %d of %d at +%dms: got %+v, model %+v", i, name, ret.Unused, g.units, now.Sub(Base).Milliseconds(), got, want)
					}
				}
			}
		}
	})
}

// StrictLeases runs workers goroutines over stores (the same counters seen
// through independent clients), each a holder that leases from one fixed
// window of n, admits some of what it was granted and returns the rest.
// Every call happens at one of a few window starts, so the test knows which
// window each admitted unit counts in: it counts them, and no window may
// admit more than n; once every lease is returned, a last holder takes what
// is left, and every window must have admitted exactly n.
func StrictLeases(t *testing.T, stores []sluice.Leaser, workers int, n int64) {
	t.Helper()
	const windows = 3
	w := 10 * time.Second
	limits := []sluice.Limit{sluice.FixedWindow(n, w).Named("global")}
	ctx := context.Background()
	for win := range windows {
		now := Base.Add(time.Duration(win) * w)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		grab := func(store sluice.Leaser, holder string, want int64, use func(granted int64) int64) (bool, error) {
			g, err := store.Lease(ctx, sluice.LeaseRequest{Tenant: t.Name(), Rule: "strict", Subject: "hot", Limits: limits,
				Holder: holder, Want: want, TTL: time.Minute, Now: now})
			if err != nil || !g.Decision.Allowed {
				return false, err
			}
			used := use(g.Granted)
			if total := admitted.Add(used); total > n {
				return true, fmt.Errorf("window %d: %d admitted of a limit of %d", win, total, n)
			}
			res, err := store.ReturnLease(ctx, sluice.LeaseReturn{Tenant: t.Name(), ID: g.ID, Unused: g.Granted - used, Now: now})
			if err == nil && res.Status != sluice.LeaseReturned {
				err = fmt.Errorf("return answered %q", res.Status)
			}
			return true, err
		}
		for wk := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				store := stores[wk%len(stores)]
				holder := "h" + strconv.Itoa(wk)
				for {
					ok, err := grab(store, holder, 1+rand.Int64N(min(n, 16)), func(granted int64) int64 { return rand.Int64N(granted + 1) })
					if err != nil {
						t.Error(err)
						return
					}
					if !ok {
						return // the window was full when this holder asked
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// Units returned after the last deny are left: one holder takes
		// them all, so the window must end exactly full.
		for {
			ok, err := grab(stores[0], "last", n, func(granted int64) int64 { return granted })
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
		}
		if got := admitted.Load(); got != n {
			t.Fatalf("window %d admitted %d, want exactly the limit of %d", win, got, n)
		}
	}
}

// BenchmarkLeases compares a plain check of BenchLimits with a lease of one
// unit of them and its return (the worst case for leasing: a batch of one),
// and with a lease of 100 units and its return (each pair then stands for
// 100 admissions), serial and with 64 goroutines across 10,000 subjects.
func BenchmarkLeases(b *testing.B, store sluice.Leaser) {
	ctx := context.Background()
	subjects := make([]string, 10_000)
	for i := range subjects {
		subjects[i] = "user-" + strconv.Itoa(i)
	}
	// Both fail b with Error, not Fatal: they run on RunParallel's
	// goroutines too.
	plain := func(b *testing.B, subject string) bool {
		if _, err := store.Check(ctx, sluice.Request{Rule: "bench", Subject: subject, Limits: BenchLimits, Cost: 1}); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	pair := func(want int64) func(b *testing.B, subject string) bool {
		return func(b *testing.B, subject string) bool {
			g, err := store.Lease(ctx, sluice.LeaseRequest{Rule: "bench-leases", Subject: subject, Limits: BenchLimits, Holder: "bench", Want: want, TTL: time.Minute})
			if err != nil || g.Granted != want {
				b.Errorf("lease: %+v %v", g, err)
				return false
			}
			if res, err := store.ReturnLease(ctx, sluice.LeaseReturn{ID: g.ID, Unused: 0}); err != nil || res.Status != sluice.LeaseReturned {
				b.Errorf("return: %+v %v", res, err)
				return false
			}
			return true
		}
	}
	for _, c := range []struct {
		name string
		op   func(*testing.B, string) bool
	}{{"check", plain}, {"lease-return", pair(1)}, {"lease100-return", pair(100)}} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !c.op(b, subjects[i%len(subjects)]) {
					return
				}
				i++
			}
		})
		b.Run(c.name+"/parallel64", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !c.op(b, subjects[next.Add(1)%int64(len(subjects))]) {
						return
					}
				}
			})
		})
	}
}
