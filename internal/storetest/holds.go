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

	"github.com/sluicelabs/sluice"
)

// RunHolds runs the conformance cases of holds (concurrency limits and
// reserve-then-settle) against the store newStore returns. Every subtest uses
// its own tenant.
func RunHolds(t *testing.T, newStore func(t *testing.T) sluice.Holder) {
	store := newStore(t)
	ctx := context.Background()

	check := func(t *testing.T, limits []sluice.Limit, atMs, cost int64, reserve bool) sluice.Decision {
		t.Helper()
		d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Cost: cost, Reserve: reserve, Now: at(atMs)})
		if err != nil {
			t.Fatalf("t=%dms cost %d: %v", atMs, cost, err)
		}
		return d
	}
	want := func(t *testing.T, d sluice.Decision, allowed bool, remaining, retry int64) {
		t.Helper()
		if d.Allowed != allowed || d.Remaining != remaining || d.RetryAfter != ms(retry) {
			t.Fatalf("got %v; want allowed=%v remaining=%d retry=%dms", d, allowed, remaining, retry)
		}
		if allowed != (d.Hold != nil) && d.Limits[0].Algorithm == sluice.AlgorithmConcurrency {
			t.Fatalf("allowed=%v but hold %+v", allowed, d.Hold)
		}
	}
	op := func(t *testing.T, id string, action sluice.HoldAction, cost, atMs int64, status sluice.HoldStatus) sluice.HoldResult {
		t.Helper()
		res, err := store.Hold(ctx, sluice.HoldOp{Tenant: t.Name(), ID: id, Action: action, Cost: cost, Now: at(atMs)})
		if err != nil {
			t.Fatalf("%s %s at t=%dms: %v", action, id, atMs, err)
		}
		if res.Status != status {
			t.Fatalf("%s at t=%dms: status %q, want %q", action, atMs, res.Status, status)
		}
		return res
	}
	cc := []sluice.Limit{sluice.Concurrency(2, time.Second).Named("c")}

	t.Run("Concurrency", func(t *testing.T) {
		t.Run("admits_up_to_the_limit_then_denies_until_the_earliest_expiry", func(t *testing.T) {
			a := check(t, cc, 0, 1, false)
			want(t, a, true, 1, 0)
			if a.Hold.ExpiresIn != time.Second || a.ResetAfter != time.Second {
				t.Fatalf("hold %+v reset %v; want both 1s", a.Hold, a.ResetAfter)
			}
			want(t, check(t, cc, 100, 1, false), true, 0, 0)
			want(t, check(t, cc, 200, 1, false), false, 0, 800)
			// A peek takes no lease and gets no hold.
			if d := check(t, cc, 200, 0, false); !d.Allowed || d.Hold != nil {
				t.Fatalf("peek: %v hold %+v", d, d.Hold)
			}
			// At the first lease's expiry the check fits.
			want(t, check(t, cc, 999, 1, false), false, 0, 1)
			want(t, check(t, cc, 1000, 1, false), true, 0, 0)
		})
		t.Run("release_frees_at_once_and_is_idempotent", func(t *testing.T) {
			a := check(t, cc, 0, 1, false)
			check(t, cc, 0, 1, false)
			want(t, check(t, cc, 10, 1, false), false, 0, 990)
			if res := op(t, a.Hold.ID, sluice.HoldRelease, 0, 20, sluice.HoldReleased); res.LeasesFreed != 1 || res.Rule != "r" || res.Subject != "s" {
				t.Fatalf("release: %+v", res)
			}
			op(t, a.Hold.ID, sluice.HoldRelease, 0, 21, sluice.HoldFinished)
			op(t, a.Hold.ID, sluice.HoldExtend, 0, 21, sluice.HoldFinished)
			want(t, check(t, cc, 30, 1, false), true, 0, 0)
		})
		t.Run("weight_is_the_cost", func(t *testing.T) {
			l := []sluice.Limit{sluice.Concurrency(5, time.Second).Named("c")}
			check(t, l, 0, 3, false)
			want(t, check(t, l, 10, 3, false), false, 2, 990)
			want(t, check(t, l, 10, 2, false), true, 0, 0)
		})
		t.Run("expires_at_the_ttl_and_late_release_says_so", func(t *testing.T) {
			a := check(t, cc, 0, 2, false)
			want(t, check(t, cc, 999, 1, false), false, 0, 1)
			d := check(t, cc, 1000, 1, false)
			want(t, d, true, 1, 0)
			if d.ExpiredLeases != 1 {
				t.Fatalf("expired leases found: %d, want 1", d.ExpiredLeases)
			}
			op(t, a.Hold.ID, sluice.HoldRelease, 0, 1001, sluice.HoldExpired)
			op(t, a.Hold.ID, sluice.HoldSettle, 1, 1001, sluice.HoldExpired)
			want(t, check(t, cc, 1002, 1, false), true, 0, 0)
		})
		t.Run("extend_renews_the_lease", func(t *testing.T) {
			a := check(t, cc, 0, 2, false)
			if res := op(t, a.Hold.ID, sluice.HoldExtend, 0, 600, sluice.HoldExtended); res.ExpiresIn != time.Second {
				t.Fatalf("extend: %+v", res)
			}
			want(t, check(t, cc, 1200, 1, false), false, 0, 400)
			want(t, check(t, cc, 1600, 1, false), true, 1, 0)
		})
		t.Run("unknown_and_other_tenants_holds_are_unknown", func(t *testing.T) {
			a := check(t, cc, 0, 2, false)
			res, err := store.Hold(ctx, sluice.HoldOp{Tenant: t.Name() + "-other", ID: a.Hold.ID, Action: sluice.HoldRelease, Now: at(1)})
			if err != nil || res.Status != sluice.HoldUnknown {
				t.Fatalf("another tenant's release: %+v, %v", res, err)
			}
			other := sluice.NewHoldID(t.Name(), "r", "s")
			op(t, other, sluice.HoldRelease, 0, 1, sluice.HoldUnknown)
			want(t, check(t, cc, 2, 1, false), false, 0, 998)
		})
		t.Run("malformed_op_is_an_input_error", func(t *testing.T) {
			for _, o := range []sluice.HoldOp{
				{ID: "nope", Action: sluice.HoldRelease},
				{ID: sluice.NewHoldID("a", "b", "c"), Action: "cancel"},
				{ID: sluice.NewHoldID("a", "b", "c"), Action: sluice.HoldSettle, Cost: -1},
			} {
				if _, err := store.Hold(ctx, o); !errors.Is(err, sluice.ErrInvalid) {
					t.Fatalf("%+v: %v, want ErrInvalid", o, err)
				}
			}
		})
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		t.Run("concurrency_deny_consumes_no_tokens", func(t *testing.T) {
			l := []sluice.Limit{sluice.Concurrency(1, time.Second).Named("c"), sluice.TokenBucket(5, 1).Named("b")}
			want(t, check(t, l, 0, 1, false), true, 0, 0)
			d := check(t, l, 10, 1, false)
			if d.Allowed || d.Limits[1].Remaining != 4 || d.Limits[0].RetryAfter != 990*time.Millisecond {
				t.Fatalf("second check: %+v", d)
			}
			// Still 4 tokens: the concurrency deny took none.
			if d := check(t, []sluice.Limit{l[1]}, 10, 0, false); d.Remaining != 4 {
				t.Fatalf("bucket after a concurrency deny: %v, want 4 remaining", d)
			}
		})
		t.Run("rate_deny_takes_no_lease_nor_hold", func(t *testing.T) {
			l := []sluice.Limit{sluice.Concurrency(2, time.Second).Named("c"), sluice.FixedWindow(1, time.Minute).Named("w")}
			check(t, l, 0, 1, false)
			d := check(t, l, 10, 1, false)
			if d.Allowed || d.Hold != nil || d.Limits[0].Remaining != 1 {
				t.Fatalf("window deny: %+v", d)
			}
			if d := check(t, l[:1], 20, 1, false); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("the denied check must have taken no lease: %v", d)
			}
		})
	})

	t.Run("Reserve", func(t *testing.T) {
		tb := []sluice.Limit{sluice.TokenBucket(10, 1).Named("b")}
		t.Run("settle_below_the_estimate_refunds", func(t *testing.T) {
			d := check(t, tb, 0, 6, true)
			want(t, d, true, 4, 0)
			if d.Hold == nil || d.Hold.ExpiresIn != sluice.DefaultHoldTTL {
				t.Fatalf("reservation hold: %+v", d.Hold)
			}
			if res := op(t, d.Hold.ID, sluice.HoldSettle, 2, 0, sluice.HoldSettled); !res.Refunded {
				t.Fatalf("settle: %+v", res)
			}
			want(t, check(t, tb, 0, 0, false), true, 8, 0)
			// Settling twice changes nothing.
			op(t, d.Hold.ID, sluice.HoldSettle, 0, 0, sluice.HoldFinished)
			want(t, check(t, tb, 0, 0, false), true, 8, 0)
		})
		t.Run("refund_is_capped_at_capacity", func(t *testing.T) {
			d := check(t, tb, 0, 5, true)
			op(t, d.Hold.ID, sluice.HoldSettle, 0, 4000, sluice.HoldSettled)
			if d := check(t, tb, 4000, 0, false); d.Remaining != 10 || d.ResetAfter != 0 {
				t.Fatalf("after a refund past capacity: %v", d)
			}
		})
		t.Run("settle_above_the_estimate_goes_into_debt", func(t *testing.T) {
			d := check(t, tb, 0, 5, true)
			check(t, tb, 0, 5, false)
			op(t, d.Hold.ID, sluice.HoldSettle, 10, 0, sluice.HoldSettled)
			// 5 tokens of debt: a cost of 1 waits 6s.
			want(t, check(t, tb, 0, 1, false), false, 0, 6000)
			want(t, check(t, tb, 6000, 1, false), true, 0, 0)
		})
		t.Run("debt_is_at_most_a_full_bucket", func(t *testing.T) {
			a, b, c := check(t, tb, 0, 4, true), check(t, tb, 0, 4, true), check(t, tb, 0, 2, true)
			for _, d := range []sluice.Decision{a, b, c} {
				op(t, d.Hold.ID, sluice.HoldSettle, 10, 0, sluice.HoldSettled)
			}
			// 6 + 6 + 8 over the estimates, but at most 10 tokens of debt.
			want(t, check(t, tb, 0, 1, false), false, 0, 11000)
		})
		t.Run("release_keeps_the_estimate", func(t *testing.T) {
			d := check(t, tb, 0, 6, true)
			op(t, d.Hold.ID, sluice.HoldRelease, 0, 0, sluice.HoldReleased)
			want(t, check(t, tb, 0, 0, false), true, 4, 0)
		})
		t.Run("settle_after_the_ttl_is_refused_and_changes_nothing", func(t *testing.T) {
			l := []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("w")}
			d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: l, Cost: 6, Reserve: true, HoldTTL: time.Second, Now: at(0)})
			if err != nil || d.Hold == nil {
				t.Fatalf("reserve: %v %v", d, err)
			}
			op(t, d.Hold.ID, sluice.HoldSettle, 1, 1000, sluice.HoldExpired)
			want(t, check(t, l, 1000, 0, false), true, 4, 0)
		})
		t.Run("settle_cost_that_can_never_fit_is_an_input_error", func(t *testing.T) {
			d := check(t, tb, 0, 6, true)
			if _, err := store.Hold(ctx, sluice.HoldOp{Tenant: t.Name(), ID: d.Hold.ID, Action: sluice.HoldSettle, Cost: 11, Now: at(0)}); !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("settle 11 on a bucket of 10: %v", err)
			}
			op(t, d.Hold.ID, sluice.HoldSettle, 6, 0, sluice.HoldSettled)
			want(t, check(t, tb, 0, 0, false), true, 4, 0)
		})
		t.Run("fixed_window_refund_counts_in_the_charged_window_only", func(t *testing.T) {
			l := []sluice.Limit{sluice.FixedWindow(10, time.Second).Named("w")}
			a := check(t, l, 0, 5, true)
			b := check(t, l, 500, 5, true)
			op(t, a.Hold.ID, sluice.HoldSettle, 1, 900, sluice.HoldSettled)
			want(t, check(t, l, 900, 0, false), true, 4, 0)
			check(t, l, 1000, 3, false)
			// b's window is over: its refund changes nothing now.
			op(t, b.Hold.ID, sluice.HoldSettle, 0, 1100, sluice.HoldSettled)
			want(t, check(t, l, 1100, 0, false), true, 7, 0)
		})
		t.Run("sliding_window_refund_reaches_the_previous_window", func(t *testing.T) {
			l := []sluice.Limit{sluice.SlidingWindow(10, time.Second).Named("w")}
			a := check(t, l, 0, 8, true)
			// At 1500 the previous window weighs half: 4 used, 6 left.
			want(t, check(t, l, 1500, 0, false), true, 6, 0)
			op(t, a.Hold.ID, sluice.HoldSettle, 2, 1500, sluice.HoldSettled)
			want(t, check(t, l, 1500, 0, false), true, 9, 0)
		})
		t.Run("sliding_window_refund_reaches_the_previous_window_once_the_next_is_written", func(t *testing.T) {
			// A check in the next window moves the estimate's count to the
			// previous-window slot of the counter: the refund must follow
			// it there.
			l := []sluice.Limit{sluice.SlidingWindow(10, time.Second).Named("w")}
			a := check(t, l, 0, 8, true)
			want(t, check(t, l, 1200, 1, false), true, 2, 0) // 8*0.8 + 1 used
			op(t, a.Hold.ID, sluice.HoldSettle, 2, 1500, sluice.HoldSettled)
			// 2*0.5 + 1 used: 8 left (5 if the refund missed the slot).
			want(t, check(t, l, 1500, 0, false), true, 8, 0)
		})
		t.Run("with_a_lease_settle_frees_it", func(t *testing.T) {
			l := []sluice.Limit{sluice.Concurrency(4, time.Second).Named("c"), sluice.TokenBucket(10, 1).Named("b")}
			d := check(t, l, 0, 4, true)
			if !d.Allowed || d.Hold.ExpiresIn != time.Second {
				t.Fatalf("reserve with a lease: %v %+v", d, d.Hold)
			}
			if d := check(t, l, 0, 1, false); d.Allowed {
				t.Fatalf("lease not held: %v", d)
			}
			if res := op(t, d.Hold.ID, sluice.HoldSettle, 1, 10, sluice.HoldSettled); res.LeasesFreed != 1 {
				t.Fatalf("settle: %+v", res)
			}
			d = check(t, l, 10, 1, false)
			if !d.Allowed || d.Limits[1].Remaining != 8 {
				t.Fatalf("after settle: %+v", d)
			}
		})
	})

	t.Run("SettleAfterALimitChange", func(t *testing.T) {
		// A settle is judged against the limits as they are at settle time
		// (HoldOp.Limits): the capacity-cut sequences of issue 26.
		settleNow := func(t *testing.T, id string, cost, atMs int64, now []sluice.Limit) {
			t.Helper()
			res, err := store.Hold(ctx, sluice.HoldOp{Tenant: t.Name(), ID: id, Action: sluice.HoldSettle, Cost: cost, Now: at(atMs),
				Limits: func(rule string) []sluice.Limit {
					if rule != "r" {
						t.Errorf("asked for the limits of rule %q", rule)
					}
					return now
				}})
			if err != nil || res.Status != sluice.HoldSettled {
				t.Fatalf("settle %d at t=%dms: %+v %v", cost, atMs, res, err)
			}
		}
		hour := func(algorithm sluice.Algorithm, capacity int64) []sluice.Limit {
			switch algorithm {
			case sluice.AlgorithmTokenBucket:
				return []sluice.Limit{sluice.TokenBucket(capacity, 1.0/3600).Named("l")}
			case sluice.AlgorithmSlidingWindow:
				return []sluice.Limit{sluice.SlidingWindow(capacity, time.Hour).Named("l")}
			}
			return []sluice.Limit{sluice.FixedWindow(capacity, time.Hour).Named("l")}
		}
		for _, c := range []struct {
			algorithm sluice.Algorithm
			// remaining at the cut capacity and once raised back, after
			// the settle: a bucket's level is charged from the lowered
			// level (so nothing comes back with the raise); a window's
			// count is charged as it is (and judged against each limit).
			// before is remaining at the cut capacity before the settle.
			before, cut, raised int64
		}{
			{sluice.AlgorithmTokenBucket, 3, 0, 0},
			{sluice.AlgorithmSlidingWindow, 1, 0, 5},
			{sluice.AlgorithmFixedWindow, 1, 0, 5},
		} {
			t.Run(string(c.algorithm)+"_charge_above_the_estimate_after_a_capacity_cut", func(t *testing.T) {
				d := check(t, hour(c.algorithm, 10), 0, 2, true)
				want(t, d, true, 8, 0)
				want(t, check(t, hour(c.algorithm, 3), 10, 0, false), true, c.before, 0)
				settleNow(t, d.Hold.ID, 5, 20, hour(c.algorithm, 3))
				if d := check(t, hour(c.algorithm, 3), 30, 0, false); d.Remaining != c.cut {
					t.Fatalf("at the cut capacity after the settle: %v; want remaining %d", d, c.cut)
				}
				if d := check(t, hour(c.algorithm, 10), 40, 0, false); d.Remaining != c.raised {
					t.Fatalf("raised back after the settle: %v; want remaining %d", d, c.raised)
				}
			})
		}
		t.Run("token_bucket_refund_up_to_a_raised_capacity", func(t *testing.T) {
			d := check(t, hour(sluice.AlgorithmTokenBucket, 10), 0, 8, true)
			settleNow(t, d.Hold.ID, 0, 10, hour(sluice.AlgorithmTokenBucket, 20))
			if d := check(t, hour(sluice.AlgorithmTokenBucket, 20), 20, 0, false); d.Remaining != 10 {
				t.Fatalf("after the refund: %v; want remaining 10", d)
			}
		})
		t.Run("token_bucket_refills_at_the_new_rate_before_the_charge", func(t *testing.T) {
			l := []sluice.Limit{sluice.TokenBucket(10, 1).Named("l")}
			faster := []sluice.Limit{sluice.TokenBucket(10, 2).Named("l")}
			d := check(t, l, 0, 6, true)
			// 2 s at 2 tokens/s: 4 + 4, then 3 more charged (3 left if
			// refilled at the old rate).
			settleNow(t, d.Hold.ID, 9, 2000, faster)
			if d := check(t, faster, 2000, 0, false); d.Remaining != 5 {
				t.Fatalf("refilled at the new rate: %v; want remaining 5", d)
			}
		})
	})

	t.Run("ClockSteps", func(t *testing.T) {
		t.Run("a_clock_stepping_back_never_frees_a_lease_early", func(t *testing.T) {
			check(t, cc, 1000, 2, false)
			want(t, check(t, cc, 500, 1, false), false, 0, 1500)
			want(t, check(t, cc, 2000, 1, false), true, 1, 0)
		})
		t.Run("a_clock_stepping_forward_expires_leases", func(t *testing.T) {
			a := check(t, cc, 0, 2, false)
			want(t, check(t, cc, 3_600_000, 2, false), true, 0, 0)
			op(t, a.Hold.ID, sluice.HoldRelease, 0, 3_600_000, sluice.HoldUnknown)
		})
	})

	t.Run("Reset_keeps_leases_in_use", func(t *testing.T) {
		// N in flight across a reset: the reset frees nothing, the
		// holders' releases still apply, and only then is there room.
		l := []sluice.Limit{sluice.Concurrency(2, time.Second).Named("c"), sluice.FixedWindow(5, time.Hour).Named("w")}
		a, b := check(t, l, 0, 1, false), check(t, l, 0, 1, false)
		want(t, a, true, 1, 0)
		want(t, b, true, 0, 0)
		if err := store.Reset(ctx, t.Name(), "r", "s", l); err != nil {
			t.Fatal(err)
		}
		d := check(t, l, 1, 1, false)
		if d.Allowed || d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != 5 {
			t.Fatalf("after the reset: %+v; want the leases held and the window's count gone", d)
		}
		op(t, a.Hold.ID, sluice.HoldRelease, 0, 2, sluice.HoldReleased)
		want(t, check(t, l, 3, 1, false), true, 0, 0)
		if res := op(t, b.Hold.ID, sluice.HoldRelease, 0, 4, sluice.HoldReleased); res.LeasesFreed != 1 {
			t.Fatalf("release after the reset: %+v", res)
		}
	})

	t.Run("Reset_forgets_the_estimates_of_open_reservations", func(t *testing.T) {
		// A reset gave a reservation's estimate back already: settling it
		// later must not give it back again out of the fresh count, nor
		// charge the fresh count for what it used beyond.
		for _, l := range []sluice.Limit{
			sluice.FixedWindow(10, time.Hour).Named("w"),
			sluice.SlidingWindow(10, time.Hour).Named("w"),
			sluice.TokenBucket(10, 0.01).Named("w"),
			sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 10, Mode: sluice.RefillAdd}).Named("w"),
		} {
			limits := []sluice.Limit{l}
			reset := func(t *testing.T) {
				t.Helper()
				if err := store.Reset(ctx, t.Name(), "r", "s", limits); err != nil {
					t.Fatal(err)
				}
			}
			t.Run(string(l.Algorithm)+"/a_refund_after_a_reset_admits_nothing_more", func(t *testing.T) {
				a := check(t, limits, 0, 10, true)
				want(t, a, true, 0, 0)
				reset(t)
				want(t, check(t, limits, 1, 10, false), true, 0, 0)
				if res := op(t, a.Hold.ID, sluice.HoldSettle, 0, 2, sluice.HoldSettled); !res.Refunded {
					t.Fatalf("settle below the estimate: %+v; want Refunded (cached denies may be stale)", res)
				}
				if d := check(t, limits, 3, 1, false); d.Allowed || d.Remaining != 0 {
					t.Fatalf("after the old hold's refund: %v; want denied with nothing left", d)
				}
			})
			t.Run(string(l.Algorithm)+"/an_extra_charge_after_a_reset_is_not_counted", func(t *testing.T) {
				a := check(t, limits, 0, 2, true)
				reset(t)
				op(t, a.Hold.ID, sluice.HoldSettle, 6, 1, sluice.HoldSettled)
				if d := check(t, limits, 2, 0, false); d.Remaining != 10 {
					t.Fatalf("after the old hold's extra charge: %v; want remaining 10", d)
				}
			})
			t.Run(string(l.Algorithm)+"/a_reservation_after_a_reset_settles", func(t *testing.T) {
				a := check(t, limits, 0, 4, true)
				reset(t)
				b := check(t, limits, 1, 6, true)
				c := check(t, limits, 1, 3, true)
				op(t, a.Hold.ID, sluice.HoldSettle, 0, 2, sluice.HoldSettled)
				op(t, b.Hold.ID, sluice.HoldSettle, 1, 2, sluice.HoldSettled)
				if d := check(t, limits, 2, 0, false); d.Remaining != 6 {
					t.Fatalf("after settling at 1 what was reserved at 6 since the reset: %v; want remaining 6", d)
				}
				// A second reset forgets c too, reserved between the two.
				reset(t)
				want(t, check(t, limits, 3, 10, false), true, 0, 0)
				op(t, c.Hold.ID, sluice.HoldSettle, 0, 4, sluice.HoldSettled)
				if d := check(t, limits, 5, 1, false); d.Allowed {
					t.Fatalf("after the second reset's refund: %v; want denied", d)
				}
			})
		}
		t.Run("a_reset_of_another_counter_changes_nothing", func(t *testing.T) {
			both := []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("a"), sluice.FixedWindow(10, time.Hour).Named("b")}
			a := check(t, both, 0, 10, true)
			if err := store.Reset(ctx, t.Name(), "r", "s", both[1:]); err != nil {
				t.Fatal(err)
			}
			op(t, a.Hold.ID, sluice.HoldSettle, 4, 1, sluice.HoldSettled)
			d := check(t, both, 2, 0, false)
			if d.Limits[0].Remaining != 6 || d.Limits[1].Remaining != 10 {
				t.Fatalf("after settling at 4 with only b reset: %+v; want a refunded to 6 left, b fresh at 10", d)
			}
		})
	})
}

// StrictConcurrency runs workers goroutines over stores (the same counters
// seen through independent clients): each takes a lease on a concurrency
// limit of n, holds it a random few milliseconds, and releases it; see
// Holders.
func StrictConcurrency(t *testing.T, stores []sluice.Holder, workers int, n int64) {
	t.Helper()
	limits := []sluice.Limit{sluice.Concurrency(n, time.Minute).Named("inflight")}
	ctx := context.Background()
	// The work is long next to a release's round trip (see Holders).
	Holders(t, workers, n, 20*time.Millisecond, func(w int) (func() error, bool, error) {
		store := stores[w%len(stores)]
		d, err := store.Check(ctx, sluice.Request{Tenant: t.Name(), Rule: "strict", Subject: "hot", Limits: limits, Cost: 1})
		if err != nil || !d.Allowed {
			return nil, false, err
		}
		return func() error {
			res, err := store.Hold(ctx, sluice.HoldOp{Tenant: t.Name(), ID: d.Hold.ID, Action: sluice.HoldRelease})
			if err == nil && res.Status != sluice.HoldReleased {
				err = fmt.Errorf("release answered %q", res.Status)
			}
			return err
		}, true, nil
	})
}

// Holders runs workers goroutines that acquire a lease on a concurrency
// limit of n (acquire reports whether it was granted, and how to release
// it), hold it between work and twice work, and release it. The holders
// themselves count how many hold at once, which must never exceed n; and n
// must be reached, else the test proved nothing. Each worker makes five
// attempts, and goes on until the limit was reached or a generous deadline.
func Holders(t *testing.T, workers int, n int64, work time.Duration, acquire func(worker int) (release func() error, ok bool, err error)) {
	t.Helper()
	var holding, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(120 * time.Second)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5 || peak.Load() < n && time.Now().Before(deadline); i++ {
				release, ok, err := acquire(w)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				admitted.Add(1)
				now := holding.Add(1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				time.Sleep(work + rand.N(work)) // the work a lease covers
				// Leave the count before releasing: a new holder may
				// enter as soon as the release lands.
				holding.Add(-1)
				if err := release(); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > n {
		t.Fatalf("%d holders at once on a concurrency limit of %d", p, n)
	}
	if p := peak.Load(); p != n {
		t.Fatalf("peak %d holders never reached the limit of %d: the test proved nothing", p, n)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
}

// CrashedHolders takes every unit of a concurrency limit with holders that
// never release, and shows the limit frees at the lease TTL and not before,
// on the store's own clock.
func CrashedHolders(t *testing.T, store sluice.Holder, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	limits := []sluice.Limit{sluice.Concurrency(3, ttl).Named("inflight")}
	req := sluice.Request{Tenant: t.Name(), Rule: "crash", Subject: "s", Limits: limits, Cost: 1}
	start := time.Now()
	for range 3 {
		if d, err := store.Check(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("take: %v %v", d, err)
		}
	}
	d, err := store.Check(ctx, req)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > ttl {
		t.Fatalf("held limit: %v %v; want a deny with retry in (0, %v]", d, err, ttl)
	}
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		d, err := store.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			if since := time.Since(start); since < ttl-50*time.Millisecond {
				t.Fatalf("freed after %v, before the ttl of %v", since, ttl)
			}
			if d.ExpiredLeases < 1 {
				t.Fatalf("the check that found a crashed lease counted %d expired, want at least 1", d.ExpiredLeases)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still held %v after the ttl of %v", time.Since(start), ttl)
		}
		time.Sleep(d.RetryAfter / 4)
	}
}

// BenchmarkHolds measures, in one run, a plain check of BenchLimits and an
// acquire/release pair (a check of BenchLimits and a concurrency limit,
// then the release of its hold), serial and parallel across 10,000
// subjects.
func BenchmarkHolds(b *testing.B, store sluice.Holder) {
	ctx := context.Background()
	subjects := make([]string, 10_000)
	for i := range subjects {
		subjects[i] = "user-" + strconv.Itoa(i)
	}
	withLease := append(append([]sluice.Limit(nil), BenchLimits...), sluice.Concurrency(1000, time.Minute).Named("inflight"))
	plain := func(b *testing.B, subject string) {
		if _, err := store.Check(ctx, sluice.Request{Rule: "bench", Subject: subject, Limits: BenchLimits, Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
	pair := func(b *testing.B, subject string) {
		d, err := store.Check(ctx, sluice.Request{Rule: "bench-holds", Subject: subject, Limits: withLease, Cost: 1})
		if err != nil || d.Hold == nil {
			b.Fatalf("acquire: %v %v", d, err)
		}
		if res, err := store.Hold(ctx, sluice.HoldOp{ID: d.Hold.ID, Action: sluice.HoldRelease}); err != nil || res.Status != sluice.HoldReleased {
			b.Fatalf("release: %+v %v", res, err)
		}
	}
	for _, c := range []struct {
		name string
		op   func(*testing.B, string)
	}{{"check", plain}, {"acquire-release", pair}} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.op(b, subjects[i%len(subjects)])
				i++
			}
		})
		b.Run(c.name+"/parallel64", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.op(b, subjects[next.Add(1)%int64(len(subjects))])
				}
			})
		})
	}
}
