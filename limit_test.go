package sluice_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestLimitValidate(t *testing.T) {
	invalid := []struct {
		name  string
		limit sluice.Limit
		says  string
	}{
		{"zero_capacity", sluice.TokenBucket(0, 1), "capacity must be a positive integer"},
		{"negative_capacity", sluice.TokenBucket(-5, 1), "capacity must be a positive integer"},
		{"zero_refill", sluice.TokenBucket(5, 0), "refill_per_second must be a positive number"},
		{"negative_refill", sluice.TokenBucket(5, -1), "refill_per_second must be a positive number"},
		{"nan_refill", sluice.TokenBucket(5, math.NaN()), "refill_per_second must be a positive number"},
		{"infinite_refill", sluice.TokenBucket(5, math.Inf(1)), "refill_per_second must be a positive number"},
		{"zero_window", sluice.SlidingWindow(5, 0), "window must be at least 1ms"},
		{"negative_window", sluice.FixedWindow(5, -time.Second), "window must be at least 1ms"},
		{"fractional_ms_window", sluice.FixedWindow(5, 1500*time.Microsecond), "whole number of milliseconds"},
		{"zero_limit", sluice.SlidingWindow(0, time.Second), "limit must be a positive integer"},
		{"too_large_to_count_exactly", sluice.SlidingWindow(1e12, 24*time.Hour), "too large"},
		{"fixed_window_too_large", sluice.FixedWindow(1e16, time.Hour), "too large"},
		{"empty_name", sluice.TokenBucket(5, 1).Named(""), "limit name"},
		{"name_with_colon", sluice.TokenBucket(5, 1).Named("a:b"), "limit name"},
		{"missing_algorithm", sluice.Limit{Name: "x", Capacity: 1}, "algorithm is required"},
		{"unknown_algorithm", sluice.Limit{Name: "x", Algorithm: "leaky_bucket", Capacity: 1}, "unknown algorithm"},
		{"window_on_a_bucket", sluice.Limit{Name: "x", Algorithm: sluice.AlgorithmTokenBucket, Capacity: 1, RefillPerSecond: 1, Window: time.Second}, "no window"},
		{"refill_on_a_window", sluice.Limit{Name: "x", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 1, RefillPerSecond: 1, Window: time.Second}, "no refill rate"},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			err := c.limit.Validate()
			if !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("message %q does not say %q", err, c.says)
			}
		})
	}
	for _, l := range []sluice.Limit{
		sluice.PerSecond(10), sluice.PerMinute(600), sluice.PerHour(1), sluice.TokenBucket(1, 1.0/3600),
		sluice.TokenBucket(1e12, 1e12), sluice.FixedWindow(1, time.Millisecond), sluice.SlidingWindow(1e6, 24*time.Hour),
		sluice.FixedWindow(1e12, 365*24*time.Hour),
	} {
		if err := l.Validate(); err != nil {
			t.Errorf("%v: %v", l, err)
		}
	}
}

func TestValidateLimitsRejectsDuplicateNames(t *testing.T) {
	err := sluice.ValidateLimits([]sluice.Limit{sluice.PerSecond(1).Named("a"), sluice.PerMinute(1).Named("a")})
	if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "used twice") {
		t.Fatalf("got %v", err)
	}
	if err := sluice.ValidateLimits(nil); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("no limits: got %v", err)
	}
}

func TestRefillRateIsAnExactFraction(t *testing.T) {
	cases := []struct {
		capacity      int64
		perSecond     float64
		tokens, every int64 // tokens per every ms
	}{
		{10, 10, 1, 100},
		{10, 2, 1, 500},
		{5, 3, 3, 1000},
		{5, 0.5, 1, 2000},
		{5, 0.1, 1, 10000},
		{5, 2.5, 1, 400},
		{5, 1000, 1, 1},
		{5, 250000, 250, 1},
		{5, 0.001, 1, 1_000_000},
		{5, 1.0 / 3, 1, 3000}, // not a short decimal: best fraction
	}
	for _, c := range cases {
		n, p := sluice.TokenBucket(c.capacity, c.perSecond).RefillRate()
		if n != c.tokens || p != c.every {
			t.Errorf("%v/s: got %d per %dms, want %d per %dms", c.perSecond, n, p, c.tokens, c.every)
		}
	}
}

func TestLimitString(t *testing.T) {
	for want, l := range map[string]sluice.Limit{
		"burst: token bucket of 10, refill 2/s": sluice.TokenBucket(10, 2).Named("burst"),
		"minute: 600 per sliding 1m":            sluice.PerMinute(600).Named("minute"),
		"hourly: 1000 per sliding 1h":           sluice.PerHour(1000).Named("hourly"),
		"w: 5 per fixed 1h30m":                  sluice.FixedWindow(5, 90*time.Minute).Named("w"),
		"w: 5 per fixed 1m30s":                  sluice.FixedWindow(5, 90*time.Second).Named("w"),
		"w: 5 per fixed 250ms":                  sluice.FixedWindow(5, 250*time.Millisecond).Named("w"),
		"fixed_window: 5 per fixed 1s":          sluice.FixedWindow(5, time.Second),
	} {
		if got := l.String(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestRequestValidate(t *testing.T) {
	limits := []sluice.Limit{sluice.TokenBucket(5, 1).Named("b")}
	for name, c := range map[string]struct {
		req  sluice.Request
		says string
	}{
		"negative_cost": {sluice.Request{Limits: limits, Cost: -1}, "must not be negative"},
		"cost_too_big":  {sluice.Request{Limits: limits, Cost: 6}, `can never fit limit "b", which holds at most 5`},
		"huge_subject":  {sluice.Request{Limits: limits, Subject: strings.Repeat("x", sluice.MaxSubjectBytes+1)}, "subject is"},
	} {
		err := c.req.Validate()
		if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want a message saying %q", name, err, c.says)
		}
	}
	if err := (sluice.Request{Limits: limits, Cost: 5}).Validate(); err != nil {
		t.Errorf("cost equal to capacity: %v", err)
	}
}

func TestFormatWindow(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", time.Hour: "1h", 90 * time.Minute: "1h30m", time.Second: "1s",
		500 * time.Millisecond: "500ms", 61 * time.Second: "1m1s", 10 * time.Second: "10s",
	} {
		if got := sluice.FormatWindow(d); got != want {
			t.Errorf("FormatWindow(%v) = %q, want %q", d, got, want)
		}
	}
}
