package sluice_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestParseLimitSpec(t *testing.T) {
	const (
		tb  = sluice.AlgorithmTokenBucket
		sw  = sluice.AlgorithmSlidingWindow
		fw  = sluice.AlgorithmFixedWindow
		con = sluice.AlgorithmConcurrency
	)
	for _, c := range []struct {
		algo    sluice.Algorithm
		spec    string
		want    sluice.Limit
		wantErr string
	}{
		{tb, "10:2/s", sluice.TokenBucket(10, 2), ""},
		{tb, "burst=100:30/m", sluice.TokenBucket(100, 0.5).Named("burst"), ""},
		{tb, "5:1/500ms", sluice.TokenBucket(5, 2), ""},
		{tb, "10:3600/h", sluice.TokenBucket(10, 1), ""},
		{tb, "daily=1000:86400/d", sluice.TokenBucket(1000, 1).Named("daily"), ""},
		{tb, "10:604800/w", sluice.TokenBucket(10, 1), ""},
		{tb, "10", sluice.Limit{}, "missing ':'"},
		{tb, "ten:2/s", sluice.Limit{}, `capacity "ten" is not a whole number`},
		{tb, "10:2", sluice.Limit{}, "has no unit"},
		{tb, "10:two/s", sluice.Limit{}, "is not a number"},
		{tb, "10:2/fortnight", sluice.Limit{}, "duration"},
		{tb, "0:2/s", sluice.Limit{}, "capacity must be a positive integer"},
		{tb, "10:-1/s", sluice.Limit{}, "refill_per_second must be a positive number"},
		{tb, "10:NaN/s", sluice.Limit{}, "refill_per_second must be a positive number"},
		{tb, "Bad Name=10:2/s", sluice.Limit{}, "limit name"},

		{sw, "600/1m", sluice.SlidingWindow(600, time.Minute), ""},
		{sw, "hourly=1000/h", sluice.SlidingWindow(1000, time.Hour).Named("hourly"), ""},
		{fw, "100/1s", sluice.FixedWindow(100, time.Second), ""},
		{fw, "daily=5000/d", sluice.FixedWindow(5000, 24*time.Hour).Named("daily"), ""},
		{sw, "5000/2d", sluice.SlidingWindow(5000, 48*time.Hour), ""},
		{sw, "5000/1w", sluice.SlidingWindow(5000, 7*24*time.Hour), ""},
		{sw, "5000/1.5w", sluice.SlidingWindow(5000, 252*time.Hour), ""},
		{sw, "5000/0d", sluice.Limit{}, "duration"},
		{sw, "5000/-1w", sluice.Limit{}, "duration"},
		{sw, "5000/xd", sluice.Limit{}, "duration"},
		{sw, "5000/1e300w", sluice.Limit{}, "duration"},
		{fw, "100", sluice.Limit{}, "missing '/'"},
		{fw, "1.5/1s", sluice.Limit{}, "is not a whole number"},
		{fw, "100/0s", sluice.Limit{}, "duration"},
		{sw, "0/1s", sluice.Limit{}, "limit must be a positive integer"},

		{con, "10/30s", sluice.Concurrency(10, 30*time.Second), ""},
		{con, "uploads=3/10m", sluice.Concurrency(3, 10*time.Minute).Named("uploads"), ""},
		{con, "3", sluice.Limit{}, "missing '/'"},
		{con, "x/30s", sluice.Limit{}, "not a whole number"},
		{con, "3/soon", sluice.Limit{}, "duration"},
		{con, "0/30s", sluice.Limit{}, "positive"},
		{con, "3/1500h", sluice.Limit{}, "at most 24h"},

		{sluice.Algorithm("leaky_bucket"), "100/1d", sluice.Limit{}, "no compact form"},
	} {
		t.Run(string(c.algo)+"/"+c.spec, func(t *testing.T) {
			got, err := sluice.ParseLimitSpec(c.algo, c.spec)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestCreditsAndCalendarSpecs(t *testing.T) {
	for spec, want := range map[string]sluice.Limit{
		"1000/month":          sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 1000, Mode: sluice.RefillSet}),
		"tokens=5/12h:add:50": sluice.Credits(sluice.Refill{Period: 12 * time.Hour, Amount: 5, Mode: sluice.RefillAdd, Max: 50}).Named("tokens"),
		"prepaid=none":        sluice.Credits(sluice.Refill{}).Named("prepaid"),
	} {
		got, err := sluice.ParseLimitSpec(sluice.AlgorithmCredits, spec)
		if err != nil || got != want {
			t.Errorf("credits %q: %+v, %v; want %+v", spec, got, err, want)
		}
	}
	got, err := sluice.ParseLimitSpec(sluice.AlgorithmFixedWindow, "monthly=1000000/month@Europe/Berlin")
	if want := (sluice.Limit{Name: "monthly", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 1_000_000, Calendar: sluice.CalendarMonth, TimeZone: "Europe/Berlin"}); err != nil || got != want {
		t.Errorf("calendar window: %+v, %v", got, err)
	}
	if got, err := sluice.ParseLimitSpec(sluice.AlgorithmFixedWindow, "5000/d"); err != nil || got.Calendar != "" || got.Window != sluice.Day {
		t.Errorf("5000/d is 24 hours, not a calendar day: %+v, %v", got, err)
	}
	for spec, says := range map[string]string{
		"1000":         "missing '/'",
		"1000/week":    "refill every must be",
		"x/month":      "not a whole number",
		"5/day:double": `mode must be "set" or "add"`,
		"5/day:set:50": "max caps an \"add\" refill",
		"-5/day":       "amount must be a positive integer",
	} {
		if _, err := sluice.ParseLimitSpec(sluice.AlgorithmCredits, spec); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("credits %q: %v; want an error saying %q", spec, err, says)
		}
	}
	if _, err := sluice.ParseLimitSpec(sluice.AlgorithmFixedWindow, "5/month@Nowhere/Land"); err == nil || !strings.Contains(err.Error(), "IANA") {
		t.Errorf("unknown zone: %v", err)
	}
}
