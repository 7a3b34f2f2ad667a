package sluice_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestCreditsAndCalendarValidation(t *testing.T) {
	monthly := sluice.Refill{Every: sluice.CalendarMonth, Amount: 100, Mode: sluice.RefillSet}
	calendar := sluice.Limit{Name: "quota", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 10, Calendar: sluice.CalendarDay}
	for _, c := range []struct {
		name  string
		limit sluice.Limit
		want  string // "" = valid
	}{
		{"credits_without_refill", sluice.Credits(sluice.Refill{}), ""},
		{"credits_monthly_set", sluice.Credits(monthly), ""},
		{"credits_daily_add_max", sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 5, Mode: sluice.RefillAdd, Max: 50}), ""},
		{"credits_every_12h", sluice.Credits(sluice.Refill{Period: 12 * time.Hour, Amount: 5, Mode: sluice.RefillAdd}), ""},
		{"refill_on_token_bucket", func() sluice.Limit { l := sluice.TokenBucket(10, 1); l.Refill = monthly; return l }(), "only a credits limit has a refill"},
		{"refill_on_fixed_window", func() sluice.Limit { l := sluice.FixedWindow(10, time.Minute); l.Refill = monthly; return l }(), "only a credits limit has a refill"},
		{"credits_with_capacity", func() sluice.Limit { l := sluice.Credits(monthly); l.Capacity = 5; return l }(), "takes only a refill"},
		{"credits_leasing", func() sluice.Limit { l := sluice.Credits(monthly); l.Lease = sluice.LeaseAuto; return l }(), "never leases"},
		{"unknown_every", sluice.Credits(sluice.Refill{Every: "week", Amount: 1, Mode: sluice.RefillSet}), `refill every must be "day", "month" or a duration`},
		{"negative_amount", sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: -1, Mode: sluice.RefillSet}), "amount must be a positive integer"},
		{"no_mode", sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 1}), `mode must be "set" or "add"`},
		{"max_on_set", sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 1, Mode: sluice.RefillSet, Max: 5}), "max caps an \"add\" refill"},
		{"max_below_amount", sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 10, Mode: sluice.RefillAdd, Max: 5}), "below the amount"},
		{"short_period", sluice.Credits(sluice.Refill{Period: time.Millisecond, Amount: 1, Mode: sluice.RefillAdd}), "at least 1s"},
		{"calendar_day", calendar, ""},
		{"calendar_month_berlin", func() sluice.Limit {
			l := calendar
			l.Calendar, l.TimeZone = sluice.CalendarMonth, "Europe/Berlin"
			return l
		}(), ""},
		{"calendar_unknown_zone", func() sluice.Limit { l := calendar; l.TimeZone = "Mars/Olympus"; return l }(), "not a known IANA time zone"},
		{"calendar_week", func() sluice.Limit { l := calendar; l.Calendar = "week"; return l }(), `"day" or "month"`},
		{"calendar_on_sliding", func() sluice.Limit {
			l := sluice.SlidingWindow(10, time.Minute)
			l.Calendar = sluice.CalendarDay
			return l
		}(), "only a fixed_window takes a calendar window"},
		{"zone_without_calendar", func() sluice.Limit { l := sluice.FixedWindow(10, time.Minute); l.TimeZone = "UTC"; return l }(), "time_zone applies to a calendar window"},
		{"calendar_leasing", func() sluice.Limit { l := calendar; l.Lease = sluice.LeaseAuto; return l }(), "never leases"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.limit.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("%v: %v", c.limit, err)
			case c.want != "" && (!errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("%v: got %v, want an invalid-input error saying %q", c.limit, err, c.want)
			}
		})
	}
}

func TestCalendarPeriods(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no zone database:", err)
	}
	ms := func(tm time.Time) int64 { return tm.UnixMilli() }
	for _, c := range []struct {
		name       string
		limit      sluice.Limit
		at         time.Time
		start, end time.Time
	}{
		{"utc_day", sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Calendar: sluice.CalendarDay},
			time.Date(2027, 1, 31, 23, 59, 59, 0, time.UTC), time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"utc_february_of_a_leap_year", sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 1, Mode: sluice.RefillSet}),
			time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"berlin_october_day_of_25_hours", sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Calendar: sluice.CalendarDay, TimeZone: "Europe/Berlin"},
			time.Date(2027, 10, 31, 12, 0, 0, 0, berlin), time.Date(2027, 10, 31, 0, 0, 0, 0, berlin), time.Date(2027, 11, 1, 0, 0, 0, 0, berlin)},
		{"berlin_month_seen_from_utc", sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Calendar: sluice.CalendarMonth, TimeZone: "Europe/Berlin"},
			time.Date(2027, 1, 31, 23, 30, 0, 0, time.UTC), time.Date(2027, 2, 1, 0, 0, 0, 0, berlin), time.Date(2027, 3, 1, 0, 0, 0, 0, berlin)},
		{"span_refill", sluice.Credits(sluice.Refill{Period: 90 * time.Minute, Amount: 1, Mode: sluice.RefillAdd}),
			time.UnixMilli(5400_000*3 + 7), time.UnixMilli(5400_000 * 3), time.UnixMilli(5400_000 * 4)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := c.limit.PeriodAt(ms(c.at))
			if !ok || p.Start != ms(c.start) || p.End != ms(c.end) {
				t.Fatalf("PeriodAt(%v) = %+v, %v; want [%v, %v)", c.at, p, ok, c.start, c.end)
			}
			next, _ := c.limit.PeriodAt(p.End)
			if next.Index != p.Index+1 || next.Start != p.End {
				t.Fatalf("the period after %+v is %+v: indexes must count periods", p, next)
			}
			table := string(c.limit.AppendPeriodTable(nil, ms(c.at)))
			prev, _ := c.limit.PeriodAt(p.Start - 1)
			if !strings.HasPrefix(table, strings.Join([]string{itoa(p.Index - 1), itoa(prev.Start), itoa(p.Start), itoa(p.End)}, ",")) {
				t.Fatalf("period table %q does not start with the period before %+v", table, p)
			}
		})
	}
	if _, ok := sluice.Credits(sluice.Refill{}).PeriodAt(0); ok {
		t.Fatal("a credits limit without a refill has no periods")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestTopUpValidation(t *testing.T) {
	credits := sluice.Credits(sluice.Refill{})
	ok := sluice.TopUp{Tenant: "t", Rule: "r", Subject: "s", Limit: credits, Add: 5, IdempotencyKey: "k"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		change func(*sluice.TopUp)
		want   string
	}{
		"negative_add": {func(u *sluice.TopUp) { u.Add = -1 }, "add must be a positive number"},
		"zero_add":     {func(u *sluice.TopUp) { u.Add = 0 }, "add must be a positive number"},
		"negative_set": {func(u *sluice.TopUp) { u.Add, u.SetBalance, u.Set = 0, true, -3 }, "set must be a balance from 0"},
		"add_and_set":  {func(u *sluice.TopUp) { u.SetBalance = true }, "either adds or sets"},
		"no_key":       {func(u *sluice.TopUp) { u.IdempotencyKey = "" }, "needs an idempotency_key"},
		"not_credits":  {func(u *sluice.TopUp) { u.Limit = sluice.TokenBucket(5, 1) }, "only a credits limit can be topped up"},
		"too_much":     {func(u *sluice.TopUp) { u.Add = sluice.MaxCredits + 1 }, "too large"},
		"key_too_long": {func(u *sluice.TopUp) { u.IdempotencyKey = strings.Repeat("k", 201) }, "more than the 200 allowed"},
		"bad_refill":   {func(u *sluice.TopUp) { u.Limit.Refill = sluice.Refill{Every: "year"} }, "refill every"},
	} {
		t.Run(name, func(t *testing.T) {
			u := ok
			c.change(&u)
			if err := u.Validate(); !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an invalid-input error saying %q", err, c.want)
			}
		})
	}
}
