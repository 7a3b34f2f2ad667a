package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// Base is the time conformance checks start at: a whole hour, so every window
// used here starts exactly at Base.
var Base = time.UnixMilli(1_800_000_000_000)

// at is Base plus ms milliseconds.
func at(ms int64) time.Time { return Base.Add(time.Duration(ms) * time.Millisecond) }

// step is one check of a sequence and what it must decide.
type step struct {
	at        int64 // ms after Base
	cost      int64
	allowed   bool
	remaining int64
	retry     int64 // ms; checked exactly
	reset     int64 // ms; -1 = not checked
}

// conformanceCase is one behaviour every store must show, run as a subtest
// of its name.
type conformanceCase struct {
	name string
	run  func(t *testing.T, h harness)
}

// extraCases are the cases of other files, which append theirs in an init
// function: func init() { extraCases = append(extraCases, holdCases...) }.
var extraCases []conformanceCase

// Run runs the conformance suite against the store newStore returns: every
// case of rateCases and extraCases, each as a subtest named for the
// behaviour. The store is shared by the cases; each uses its own tenant (its
// subtest's name), so none sees another's counters.
func Run(t *testing.T, newStore func(t *testing.T) sluice.Store) {
	h := harness{store: newStore(t)}
	for _, c := range append(rateCases[:len(rateCases):len(rateCases)], extraCases...) {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// harness is the store under test and the checks the cases share.
type harness struct{ store sluice.Store }

// sequence runs steps for one subject, checking every figure of each
// decision: allowed, remaining, retry_after exactly, and reset_after unless
// the step says -1. Exactness of a retry_after beyond the figure written in
// the step is retryExact's to check.
func (h harness) sequence(t *testing.T, limits []sluice.Limit, steps []step) {
	t.Helper()
	req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits}
	for i, s := range steps {
		req.Cost, req.Now = s.cost, at(s.at)
		d, err := h.store.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d (t=%dms cost %d): %v", i, s.at, s.cost, err)
		}
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != ms(s.retry) ||
			(s.reset >= 0 && d.ResetAfter != ms(s.reset)) {
			t.Fatalf("step %d (t=%dms cost %d): got %v; want allowed=%v remaining=%d retry=%dms reset=%dms",
				i, s.at, s.cost, d, s.allowed, s.remaining, s.retry, s.reset)
		}
	}
}

// retryExact checks, after a deny at now, that the same request is denied
// 1ms before RetryAfter and allowed at it. The probe at RetryAfter consumes,
// so a case calls it last for its subject.
func (h harness) retryExact(t *testing.T, limits []sluice.Limit, now, cost int64) {
	t.Helper()
	req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Cost: cost, Now: at(now)}
	d := h.check(t, req)
	if d.Allowed {
		t.Fatalf("t=%dms: want a deny to probe, got %v", now, d)
	}
	retry := d.RetryAfter.Milliseconds()
	req.Now = at(now + retry - 1)
	if d := h.check(t, req); d.Allowed {
		t.Fatalf("retry_after %dms at t=%dms is late: already allowed 1ms earlier: %v", retry, now, d)
	}
	req.Now = at(now + retry)
	if d := h.check(t, req); !d.Allowed {
		t.Fatalf("retry_after %dms at t=%dms is early: still denied then: %v", retry, now, d)
	}
}

// check decides req, failing t on an error.
func (h harness) check(t *testing.T, req sluice.Request) sluice.Decision {
	t.Helper()
	d, err := h.store.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("check %+v: %v", req.Limits, err)
	}
	return d
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// The limits several cases share.
var (
	bucket5   = []sluice.Limit{sluice.TokenBucket(5, 1).Named("b")}
	sliding10 = []sluice.Limit{sluice.SlidingWindow(10, time.Second).Named("w")}
	fixed3    = []sluice.Limit{sluice.FixedWindow(3, time.Second).Named("f")}
)

// rateCases are the rate-limit algorithms' behaviours.
var rateCases = []conformanceCase{
	{"TokenBucket/burst_then_deny_with_exact_retry", func(t *testing.T, h harness) {
		h.sequence(t, bucket5, []step{
			{0, 1, true, 4, 0, 1000},
			{0, 1, true, 3, 0, 2000},
			{0, 1, true, 2, 0, 3000},
			{0, 1, true, 1, 0, 4000},
			{0, 1, true, 0, 0, 5000},
			{0, 1, false, 0, 1000, 5000},
			{999, 1, false, 0, 1, 4001},
			{1000, 1, true, 0, 0, 5000},
		})
	}},
	{"TokenBucket/refill_stops_at_capacity", func(t *testing.T, h harness) {
		h.sequence(t, bucket5, []step{
			{0, 5, true, 0, 0, 5000},
			{60_000, 1, true, 4, 0, 1000},
		})
	}},
	{"TokenBucket/cost_larger_than_one", func(t *testing.T, h harness) {
		h.sequence(t, bucket5, []step{
			{0, 3, true, 2, 0, 3000},
			{0, 3, false, 2, 1000, 3000},
			{500, 3, false, 2, 500, 2500},
			{1000, 3, true, 0, 0, 5000},
		})
	}},
	{"TokenBucket/deny_does_not_consume", func(t *testing.T, h harness) {
		h.sequence(t, bucket5, []step{
			{0, 5, true, 0, 0, 5000},
			{100, 2, false, 0, 1900, 4900},
			{200, 2, false, 0, 1800, 4800},
			{2000, 2, true, 0, 0, 5000},
		})
	}},
	{"TokenBucket/peek_consumes_nothing", func(t *testing.T, h harness) {
		h.sequence(t, bucket5, []step{
			{0, 2, true, 3, 0, 2000},
			{0, 0, true, 3, 0, 2000},
			{0, 0, true, 3, 0, 2000},
			{0, 3, true, 0, 0, 5000},
			{0, 0, true, 0, 0, 5000},
		})
	}},
	{"TokenBucket/fractional_refill_rates", func(t *testing.T, h harness) {
		// 3 tokens/s: one token every 333.3ms, so the wait rounds up.
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(1, 3).Named("b")}, []step{
			{0, 1, true, 0, 0, 334},
			{0, 1, false, 0, 334, 334},
			{333, 1, false, 0, 1, 1},
			{334, 1, true, 0, 0, 334},
		})
		// 0.5 tokens/s: one token every 2s.
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(2, 0.5).Named("slow")}, []step{
			{0, 2, true, 0, 0, 4000},
			{1999, 1, false, 0, 1, 2001},
			{2000, 1, true, 0, 0, 4000},
		})
	}},
	{"TokenBucket/retry_after_is_exact", func(t *testing.T, h harness) {
		l := []sluice.Limit{sluice.TokenBucket(10, 7).Named("b")}
		h.check(t, sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: l, Cost: 10, Now: at(0)})
		h.retryExact(t, l, 5, 4)
	}},
	{"SlidingWindow/previous_window_slides_out_gradually", func(t *testing.T, h harness) {
		h.sequence(t, sliding10, []step{
			{0, 10, true, 0, 0, 2000},
			// Next window, 100ms in: the previous 10 weigh 9, so 1 fits.
			{1099, 1, false, 0, 1, 901},
			{1100, 1, true, 0, 0, 1900},
			// Now prev=10, curr=1: 10*(1-e/1000) + 1 + 1 <= 10 needs e >= 200.
			{1100, 1, false, 0, 100, 1900},
			{1200, 1, true, 0, 0, 1800},
		})
	}},
	{"SlidingWindow/retry_after_is_not_the_window_end", func(t *testing.T, h harness) {
		h.sequence(t, sliding10, []step{
			{0, 10, true, 0, 0, 2000},
			// At t=0 the 11th must wait for the next window AND for 10% of
			// the previous one to slide out: 1000 + 100.
			{0, 1, false, 0, 1100, 2000},
			{500, 1, false, 0, 600, 1500},
		})
		h.retryExact(t, sliding10, 700, 1)
	}},
	{"SlidingWindow/retry_within_the_same_window", func(t *testing.T, h harness) {
		h.sequence(t, sliding10, []step{
			{900, 8, true, 2, 0, 1100},
			// Window 1 at e=0: prev 8 weighs 8, 2 fit, 3 do not: 3 fit
			// once 8*(1-e/1000) <= 7, e >= 125.
			{1000, 3, false, 2, 125, 1000},
			{1124, 3, false, 2, 1, 876},
			{1125, 3, true, 0, 0, 1875},
		})
	}},
	{"SlidingWindow/cost_larger_than_one_waits_for_two_windows", func(t *testing.T, h harness) {
		h.sequence(t, sliding10, []step{
			{0, 10, true, 0, 0, 2000},
			// Cost 10 needs the previous window fully gone.
			{0, 10, false, 0, 2000, 2000},
		})
		h.retryExact(t, sliding10, 1500, 10)
	}},
	{"SlidingWindow/old_windows_are_forgotten", func(t *testing.T, h harness) {
		h.sequence(t, sliding10, []step{
			{0, 10, true, 0, 0, 2000},
			{2000, 10, true, 0, 0, 2000},
			{4000, 0, true, 10, 0, 0},
		})
	}},
	{"SlidingWindow/millisecond_windows", func(t *testing.T, h harness) {
		h.sequence(t, []sluice.Limit{sluice.SlidingWindow(2, 10*time.Millisecond).Named("tiny")}, []step{
			{0, 2, true, 0, 0, 20},
			{5, 1, false, 0, 10, 15},
			{15, 1, true, 0, 0, 15},
		})
	}},
	{"FixedWindow/resets_at_the_window_boundary", func(t *testing.T, h harness) {
		h.sequence(t, fixed3, []step{
			{998, 3, true, 0, 0, 2},
			{999, 1, false, 0, 1, 1},
			{1000, 1, true, 2, 0, 1000},
			{1000, 2, true, 0, 0, 1000},
			{1500, 1, false, 0, 500, 500},
		})
		h.retryExact(t, fixed3, 1700, 3)
	}},
	{"FixedWindow/peek_on_an_unused_window", func(t *testing.T, h harness) {
		h.sequence(t, fixed3, []step{{10, 0, true, 3, 0, 0}})
	}},
	{"AllOrNothing", func(t *testing.T, h harness) {
		limits := []sluice.Limit{
			sluice.TokenBucket(2, 1).Named("burst"),
			sluice.FixedWindow(5, time.Second).Named("window"),
		}
		req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Cost: 1, Now: at(0)}
		for i := 0; i < 2; i++ {
			if d := h.check(t, req); !d.Allowed {
				t.Fatalf("check %d denied: %v", i, d)
			}
		}
		d := h.check(t, req)
		if d.Allowed || d.Limits[0].Allowed || !d.Limits[1].Allowed {
			t.Fatalf("third check: want denied by burst only, got %+v", d)
		}
		if d.Limits[1].Remaining != 3 {
			t.Fatalf("a deny consumed the window limit: remaining %d, want 3", d.Limits[1].Remaining)
		}
		if d.Remaining != 0 || d.RetryAfter != time.Second {
			t.Fatalf("top-level figures must be the denying limit's: %v", d)
		}
		req.Cost, req.Now = 0, at(1)
		if d := h.check(t, req); d.Limits[1].Remaining != 3 {
			t.Fatalf("peek after deny: window remaining %d, want 3", d.Limits[1].Remaining)
		}
		// Both limits deny: the request fits only once the slower one does.
		both := []sluice.Limit{sluice.TokenBucket(2, 1).Named("burst"), sluice.FixedWindow(3, time.Second).Named("window")}
		req = sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "both", Limits: both, Cost: 2, Now: at(0)}
		h.check(t, req)
		req.Now = at(999)
		d = h.check(t, req)
		if d.Allowed || d.Limits[0].RetryAfter != 1001*time.Millisecond || d.Limits[1].RetryAfter != time.Millisecond ||
			d.RetryAfter != 1001*time.Millisecond {
			t.Fatalf("want denied by both, until the bucket refills (1001ms), got %+v", d)
		}
		h.retryExact(t, both, 999, 2)
	}},
	{"Isolation", func(t *testing.T, h harness) {
		limits := []sluice.Limit{sluice.FixedWindow(1, time.Minute).Named("one")}
		subjects := []string{"user-1", "user-2", "{user-1}", "user-1}", "{", "}", ":", "a:b", "a\x00b", "", strings.Repeat("x", 10<<10), strings.Repeat("x", 10<<10) + "y"}
		tenants := []string{t.Name() + "-a", t.Name() + "-b"}
		rules := []string{"r1", "r2"}
		for _, tenant := range tenants {
			for _, rule := range rules {
				for _, subject := range subjects {
					req := sluice.Request{Tenant: tenant, Rule: rule, Subject: subject, Limits: limits, Cost: 1, Now: at(0)}
					if d := h.check(t, req); !d.Allowed {
						t.Fatalf("tenant %q rule %q subject %.20q: first check denied, so its counter is shared with another: %v", tenant, rule, subject, d)
					}
					if d := h.check(t, req); d.Allowed {
						t.Fatalf("tenant %q rule %q subject %.20q: second check allowed: %v", tenant, rule, subject, d)
					}
				}
			}
		}
		// Tenant and rule boundaries cannot be shifted by moving bytes
		// between the parts.
		a := sluice.Request{Tenant: t.Name() + "x", Rule: "ab", Subject: "c", Limits: limits, Cost: 1, Now: at(0)}
		b := sluice.Request{Tenant: t.Name() + "x", Rule: "a", Subject: "bc", Limits: limits, Cost: 1, Now: at(0)}
		h.check(t, a)
		if d := h.check(t, b); !d.Allowed {
			t.Fatalf("rule %q/subject %q shares a counter with rule %q/subject %q", b.Rule, b.Subject, a.Rule, a.Subject)
		}
	}},
	{"Reset", func(t *testing.T, h harness) {
		limits := []sluice.Limit{sluice.TokenBucket(3, 1).Named("b"), sluice.SlidingWindow(3, time.Minute).Named("w")}
		req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: limits, Cost: 3, Now: at(0)}
		h.check(t, req)
		if err := h.store.Reset(context.Background(), t.Name(), "r", "s", limits); err != nil {
			t.Fatal(err)
		}
		if d := h.check(t, req); !d.Allowed {
			t.Fatalf("after reset: %v", d)
		}
	}},
	{"LimitChanges", func(t *testing.T, h harness) {
		req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Cost: 5, Now: at(0),
			Limits: []sluice.Limit{sluice.SlidingWindow(5, time.Minute).Named("w")}}
		h.check(t, req)
		// Raising the limit keeps the count: 5 used of 8.
		req.Limits, req.Cost = []sluice.Limit{sluice.SlidingWindow(8, time.Minute).Named("w")}, 0
		if d := h.check(t, req); d.Remaining != 3 {
			t.Fatalf("after raising the limit to 8: %v, want remaining 3", d)
		}
		// Lowering it below the count reports 0 remaining, never negative.
		req.Limits = []sluice.Limit{sluice.SlidingWindow(2, time.Minute).Named("w")}
		if d := h.check(t, req); d.Remaining != 0 {
			t.Fatalf("after lowering the limit to 2: %v, want remaining 0", d)
		}
	}},
	{"RaisedBucketKeepsRetryExact", func(t *testing.T, h harness) {
		// The state stored under the old capacity would expire (as full)
		// at 1000ms; under the raised capacity the bucket is only full at
		// 2000ms, and the retry_after promised at 81ms must hold.
		small := []sluice.Limit{sluice.TokenBucket(1, 1).Named("b")}
		big := []sluice.Limit{sluice.TokenBucket(2, 1).Named("b")}
		h.sequence(t, small, []step{{0, 1, true, 0, 0, 1000}})
		h.sequence(t, big, []step{
			{81, 2, false, 0, 1919, 1919},
			{1000, 2, false, 1, 1000, 1000},
		})
		h.retryExact(t, big, 1500, 2)
	}},
	{"BucketRateAndCapacityChange", func(t *testing.T, h harness) {
		// The new rate applies from the bucket's last update; a change of
		// the rate's unit keeps whole tokens only (never adds any).
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(5, 1).Named("b")}, []step{{0, 5, true, 0, 0, 5000}})
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(5, 2).Named("b")}, []step{
			{1500, 1, true, 2, 0, 1500},
			{1500, 3, false, 2, 500, 1500},
		})
		// 2.5 tokens at 1750 under 2/s, but only 2 whole ones carry over
		// to 1/s, which refills 0.25 since 1500: 2.25.
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(5, 1).Named("b")}, []step{
			{1750, 3, false, 2, 750, 2750},
		})
		// A bucket of 10^12 with 9*10^11 tokens, then a bucket of 1 at a
		// tiny rate (10^9 units per token): the carried tokens are capped
		// at the new capacity before scaling, so nothing overflows.
		huge := []sluice.Limit{sluice.TokenBucket(1e12, 1000).Named("h")}
		h.sequence(t, huge, []step{{0, 1e11, true, 9e11, 0, 1e11}})
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(1, 1e-6).Named("h")}, []step{
			{0, 1, true, 0, 0, 1e9},
			{0, 1, false, 0, 1e9, 1e9},
		})
	}},
	{"ClockSteppingBackwards", func(t *testing.T, h harness) {
		// A spent window must not reopen because the clock stepped back
		// into the previous one; waits count from the real (earlier) now.
		h.sequence(t, []sluice.Limit{sluice.FixedWindow(3, time.Second).Named("f")}, []step{
			{1000, 3, true, 0, 0, 1000},
			{999, 1, false, 0, 1001, 1001},
			{2000, 1, true, 2, 0, 1000},
		})
		h.sequence(t, []sluice.Limit{sluice.SlidingWindow(3, time.Second).Named("s")}, []step{
			{1000, 3, true, 0, 0, 2000},
			{999, 1, false, 0, 1001 + 334, 2001},
		})
		h.sequence(t, []sluice.Limit{sluice.TokenBucket(2, 1).Named("b")}, []step{
			{5000, 2, true, 0, 0, 2000},
			{4000, 1, false, 0, 2000, 3000},
			{6000, 1, true, 0, 0, 2000},
		})
	}},
	{"InvalidInput", func(t *testing.T, h harness) {
		good := []sluice.Limit{sluice.TokenBucket(5, 1).Named("b")}
		cases := map[string]sluice.Request{
			"negative_cost":          {Limits: good, Cost: -1},
			"cost_that_never_fits":   {Limits: good, Cost: 6},
			"no_limits":              {Cost: 1},
			"zero_capacity":          {Limits: []sluice.Limit{sluice.TokenBucket(0, 1).Named("b")}, Cost: 1},
			"zero_window":            {Limits: []sluice.Limit{sluice.SlidingWindow(5, 0).Named("w")}, Cost: 1},
			"sub_millisecond_window": {Limits: []sluice.Limit{sluice.FixedWindow(5, time.Microsecond).Named("w")}, Cost: 1},
			"negative_refill":        {Limits: []sluice.Limit{sluice.TokenBucket(5, -1).Named("b")}, Cost: 1},
			"duplicate_names":        {Limits: []sluice.Limit{good[0], good[0]}, Cost: 1},
			"unknown_algorithm":      {Limits: []sluice.Limit{{Name: "x", Algorithm: "leaky", Capacity: 1}}, Cost: 1},
		}
		for name, req := range cases {
			t.Run(name, func(t *testing.T) {
				req.Tenant, req.Rule, req.Subject, req.Now = t.Name(), "r", "s", at(0)
				_, err := h.store.Check(context.Background(), req)
				if !errors.Is(err, sluice.ErrInvalid) {
					t.Fatalf("want an error wrapping ErrInvalid, got %v", err)
				}
				if err.Error() == "" || strings.Contains(err.Error(), "%!") {
					t.Fatalf("unhelpful message %q", err)
				}
			})
		}
		// Nothing changed: the same subject still has its whole bucket.
		req := sluice.Request{Tenant: t.Name() + "/cost_that_never_fits", Rule: "r", Subject: "s", Limits: good, Cost: 5, Now: at(0)}
		if d := h.check(t, req); !d.Allowed {
			t.Fatalf("an invalid request consumed quota: %v", d)
		}
	}},
}
