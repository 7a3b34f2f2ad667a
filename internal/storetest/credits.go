package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// Credits and calendar windows: exact sequences every store must decide
// alike. Base is 2027-01-15 08:00 UTC, a Friday.

func init() { extraCases = append(extraCases, creditCases...) }

// untilUTC is the time from Base to the given UTC date, in ms.
func untilUTC(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Sub(Base).Milliseconds()
}

var (
	monthlySet = sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 10, Mode: sluice.RefillSet})
	dailyAdd   = sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 5, Mode: sluice.RefillAdd, Max: 12})
	prepaid    = sluice.Credits(sluice.Refill{})
)

// calendarWindow is a fixed_window of limit per calendar period in zone.
func calendarWindow(limit int64, cal sluice.Calendar, zone string) sluice.Limit {
	return sluice.Limit{Name: "quota", Algorithm: sluice.AlgorithmFixedWindow, Capacity: limit, Calendar: cal, TimeZone: zone}
}

// topUp tops up subject "s" of rule "r" of t's tenant, as sequence checks.
func (h harness) topUp(t *testing.T, l sluice.Limit, at int64, add, set int64, setBalance bool, key string) sluice.TopUpResult {
	t.Helper()
	cs, ok := h.store.(sluice.CreditStore)
	if !ok {
		t.Fatalf("%T is not a sluice.CreditStore", h.store)
	}
	res, err := cs.TopUp(context.Background(), sluice.TopUp{Tenant: t.Name(), Rule: "r", Subject: "s", Limit: l,
		Add: add, Set: set, SetBalance: setBalance, IdempotencyKey: key, Now: Base.Add(ms(at))})
	if err != nil {
		t.Fatalf("top up %d/%d (set %v) key %q: %v", add, set, setBalance, key, err)
	}
	return res
}

var creditCases = []conformanceCase{
	{"credits/spend_deny_and_monthly_set_refill", func(t *testing.T, h harness) {
		feb := untilUTC(2027, 2, 1)
		h.sequence(t, []sluice.Limit{monthlySet}, []step{
			{at: 0, cost: 0, allowed: true, remaining: 10, reset: feb},
			{at: 0, cost: 4, allowed: true, remaining: 6, reset: feb},
			// More than the balance: denied until the refill, nothing spent.
			{at: 1000, cost: 7, allowed: false, remaining: 6, retry: feb - 1000, reset: feb - 1000},
			{at: 1000, cost: 6, allowed: true, remaining: 0, reset: feb - 1000},
			{at: feb - 1, cost: 1, allowed: false, remaining: 0, retry: 1, reset: 1},
			// The 1st of February: back to 10, whatever was left.
			{at: feb, cost: 1, allowed: true, remaining: 9, reset: untilUTC(2027, 3, 1) - feb},
		})
	}},
	{"credits/daily_add_refill_up_to_max", func(t *testing.T, h harness) {
		day := int64(24 * time.Hour / time.Millisecond)
		midnight := untilUTC(2027, 1, 16)
		h.sequence(t, []sluice.Limit{dailyAdd}, []step{
			{at: 0, cost: 2, allowed: true, remaining: 3, reset: midnight},
			{at: midnight, cost: 0, allowed: true, remaining: 8, reset: day},
			// Two more refills: 18, capped at 12.
			{at: midnight + 2*day + 5, cost: 1, allowed: true, remaining: 11, reset: day - 5},
			{at: midnight + 2*day + 5, cost: 12, allowed: false, remaining: 11, retry: day - 5, reset: day - 5},
		})
	}},
	{"credits/top_up_applied_once_per_key", func(t *testing.T, h harness) {
		h.sequence(t, []sluice.Limit{prepaid}, []step{
			// No refill: denied with no retry_after; only a top-up helps.
			{at: 0, cost: 1, allowed: false, remaining: 0, retry: 0, reset: 0},
		})
		if res := h.topUp(t, prepaid, 10, 5, 0, false, "order-1"); res != (sluice.TopUpResult{Balance: 5, Applied: true}) {
			t.Fatalf("first top-up: %+v, want balance 5 applied", res)
		}
		if res := h.topUp(t, prepaid, 20, 5, 0, false, "order-1"); res != (sluice.TopUpResult{Balance: 5, Applied: false}) {
			t.Fatalf("retried top-up: %+v, want balance 5 not applied", res)
		}
		h.sequence(t, []sluice.Limit{prepaid}, []step{
			{at: 30, cost: 4, allowed: true, remaining: 1, reset: 0},
		})
		if res := h.topUp(t, prepaid, 40, 0, 50, true, "order-2"); res != (sluice.TopUpResult{Balance: 50, Applied: true}) {
			t.Fatalf("set: %+v, want balance 50 applied", res)
		}
		h.sequence(t, []sluice.Limit{prepaid}, []step{
			{at: 50, cost: 50, allowed: true, remaining: 0, reset: 0},
		})
	}},
	{"credits/top_up_lasts_until_a_set_refill", func(t *testing.T, h harness) {
		feb := untilUTC(2027, 2, 1)
		if res := h.topUp(t, monthlySet, 0, 100, 0, false, "k"); res.Balance != 110 {
			t.Fatalf("top-up on a fresh balance of 10: %+v, want 110", res)
		}
		h.sequence(t, []sluice.Limit{monthlySet}, []step{
			{at: 1, cost: 110, allowed: true, remaining: 0, reset: feb - 1},
			{at: feb, cost: 0, allowed: true, remaining: 10, reset: untilUTC(2027, 3, 1) - feb},
		})
	}},
	{"credits/a_rate_limit_deny_spends_no_credits", func(t *testing.T, h harness) {
		window := sluice.FixedWindow(2, time.Minute).Named("minute")
		h.topUp(t, prepaid, 0, 3, 0, false, "k")
		limits := []sluice.Limit{window, prepaid}
		h.sequence(t, limits, []step{
			{at: 0, cost: 2, allowed: true, remaining: 0, reset: -1},
			// The window denies: the credits stay at 1.
			{at: 1, cost: 1, allowed: false, remaining: 0, retry: 59_999, reset: -1},
		})
		h.sequence(t, []sluice.Limit{prepaid}, []step{{at: 2, cost: 0, allowed: true, remaining: 1, reset: 0}})
		// No credits: the window's quota is not taken either.
		h.sequence(t, limits, []step{{at: 60_000, cost: 2, allowed: false, remaining: 1, retry: 0, reset: -1}})
		h.sequence(t, []sluice.Limit{window}, []step{{at: 60_001, cost: 0, allowed: true, remaining: 2, reset: 0}})
	}},
	{"credits/bad_top_ups_change_nothing", func(t *testing.T, h harness) {
		cs, ok := h.store.(sluice.CreditStore)
		if !ok {
			t.Fatalf("%T is not a sluice.CreditStore", h.store)
		}
		h.topUp(t, prepaid, 0, 7, 0, false, "k")
		for name, up := range map[string]sluice.TopUp{
			"negative add":     {Add: -5, IdempotencyKey: "a"},
			"zero add":         {IdempotencyKey: "b"},
			"negative set":     {Set: -1, SetBalance: true, IdempotencyKey: "c"},
			"add and set":      {Add: 1, Set: 1, SetBalance: true, IdempotencyKey: "d"},
			"no key":           {Add: 1},
			"not credits":      {Add: 1, IdempotencyKey: "e", Limit: sluice.FixedWindow(5, time.Minute)},
			"huge add":         {Add: sluice.MaxCredits + 1, IdempotencyKey: "f"},
			"key over 200 B":   {Add: 1, IdempotencyKey: string(make([]byte, 201))},
			"invalid refill":   {Add: 1, IdempotencyKey: "g", Limit: sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: -1, Mode: sluice.RefillSet})},
			"unknown schedule": {Add: 1, IdempotencyKey: "h", Limit: sluice.Credits(sluice.Refill{Every: "week", Amount: 1, Mode: sluice.RefillSet})},
		} {
			up.Tenant, up.Rule, up.Subject, up.Now = t.Name(), "r", "s", Base
			if up.Limit == (sluice.Limit{}) {
				up.Limit = prepaid
			}
			if _, err := cs.TopUp(context.Background(), up); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("%s: got %v, want an error wrapping ErrInvalid", name, err)
			}
		}
		h.sequence(t, []sluice.Limit{prepaid}, []step{{at: 1, cost: 0, allowed: true, remaining: 7, reset: 0}})
	}},
	{"credits/reserve_then_settle", func(t *testing.T, h harness) {
		holder, ok := h.store.(sluice.Holder)
		if !ok {
			t.Skip("not a Holder")
		}
		h.topUp(t, prepaid, 0, 100, 0, false, "k")
		req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: []sluice.Limit{prepaid}, Cost: 30, Reserve: true, Now: at(1)}
		d := h.check(t, req)
		if !d.Allowed || d.Remaining != 70 || d.Hold == nil {
			t.Fatalf("reserve 30 of 100: %v hold %v", d, d.Hold)
		}
		// The actual cost was 12: 18 back.
		if _, err := holder.Hold(context.Background(), sluice.HoldOp{Tenant: t.Name(), ID: d.Hold.ID, Action: sluice.HoldSettle, Cost: 12, Now: at(2)}); err != nil {
			t.Fatal(err)
		}
		h.sequence(t, []sluice.Limit{prepaid}, []step{{at: 3, cost: 0, allowed: true, remaining: 88, reset: 0}})
		// Settling above the estimate takes the rest, never below zero.
		req.Cost, req.Now = 80, at(4)
		d = h.check(t, req)
		if !d.Allowed || d.Remaining != 8 {
			t.Fatalf("reserve 80 of 88: %v", d)
		}
		if _, err := holder.Hold(context.Background(), sluice.HoldOp{Tenant: t.Name(), ID: d.Hold.ID, Action: sluice.HoldSettle, Cost: 200, Now: at(5)}); err != nil {
			t.Fatal(err)
		}
		h.sequence(t, []sluice.Limit{prepaid}, []step{{at: 6, cost: 0, allowed: true, remaining: 0, reset: 0}})
	}},
	{"calendar/day_utc_resets_at_midnight", func(t *testing.T, h harness) {
		midnight := untilUTC(2027, 1, 16)
		h.sequence(t, []sluice.Limit{calendarWindow(3, sluice.CalendarDay, "")}, []step{
			{at: 0, cost: 0, allowed: true, remaining: 3, reset: 0},
			{at: 0, cost: 3, allowed: true, remaining: 0, reset: midnight},
			{at: 5, cost: 1, allowed: false, remaining: 0, retry: midnight - 5, reset: midnight - 5},
			{at: midnight - 1, cost: 1, allowed: false, remaining: 0, retry: 1, reset: 1},
			{at: midnight, cost: 1, allowed: true, remaining: 2, reset: 24 * 3600_000},
		})
	}},
	{"calendar/month_in_a_time_zone", func(t *testing.T, h harness) {
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Skip("no zone database:", err)
		}
		// January ends at 2027-01-31 23:00 UTC in Berlin (UTC+1).
		end := time.Date(2027, 2, 1, 0, 0, 0, 0, berlin).Sub(Base).Milliseconds()
		next := time.Date(2027, 3, 1, 0, 0, 0, 0, berlin).Sub(Base).Milliseconds()
		h.sequence(t, []sluice.Limit{calendarWindow(2, sluice.CalendarMonth, "Europe/Berlin")}, []step{
			{at: 0, cost: 2, allowed: true, remaining: 0, reset: end},
			{at: end - 1, cost: 1, allowed: false, remaining: 0, retry: 1, reset: 1},
			{at: end, cost: 1, allowed: true, remaining: 1, reset: next - end},
		})
	}},
	{"calendar/daylight_saving_day_is_23_hours", func(t *testing.T, h harness) {
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Skip("no zone database:", err)
		}
		// 2027-03-14 is the day clocks go forward in New York.
		start := time.Date(2027, 3, 14, 0, 0, 0, 0, ny).Sub(Base).Milliseconds()
		end := time.Date(2027, 3, 15, 0, 0, 0, 0, ny).Sub(Base).Milliseconds()
		if end-start != 23*3600_000 {
			t.Fatalf("the zone database says the day lasts %dms", end-start)
		}
		h.sequence(t, []sluice.Limit{calendarWindow(1, sluice.CalendarDay, "America/New_York")}, []step{
			{at: start, cost: 1, allowed: true, remaining: 0, reset: 23 * 3600_000},
			{at: start + 1, cost: 1, allowed: false, remaining: 0, retry: 23*3600_000 - 1, reset: 23*3600_000 - 1},
			{at: end, cost: 1, allowed: true, remaining: 0, reset: 24 * 3600_000},
		})
	}},
	{"calendar/reserve_then_settle", func(t *testing.T, h harness) {
		holder, ok := h.store.(sluice.Holder)
		if !ok {
			t.Skip("not a Holder")
		}
		l := calendarWindow(10, sluice.CalendarDay, "")
		req := sluice.Request{Tenant: t.Name(), Rule: "r", Subject: "s", Limits: []sluice.Limit{l}, Cost: 8, Reserve: true, Now: at(1)}
		d := h.check(t, req)
		if !d.Allowed || d.Hold == nil {
			t.Fatalf("reserve: %v", d)
		}
		if _, err := holder.Hold(context.Background(), sluice.HoldOp{Tenant: t.Name(), ID: d.Hold.ID, Action: sluice.HoldSettle, Cost: 3, Now: at(2),
			Limits: func(string) []sluice.Limit { return []sluice.Limit{l} }}); err != nil {
			t.Fatal(err)
		}
		h.sequence(t, []sluice.Limit{l}, []step{{at: 3, cost: 0, allowed: true, remaining: 7, reset: untilUTC(2027, 1, 16) - 3}})
	}},
}
