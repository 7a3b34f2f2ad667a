package sluice_test

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
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
	err := sluice.Limits([]sluice.Limit{sluice.PerSecond(1).Named("a"), sluice.PerMinute(1).Named("a")}).Validate()
	if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "used twice") {
		t.Fatalf("got %v", err)
	}
	if err := sluice.Limits(nil).Validate(); !errors.Is(err, sluice.ErrInvalid) {
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

// refillRateBig is RefillRate as it was written first, with math/big: the
// reference the allocation-free version must match exactly.
func refillRateBig(l sluice.Limit) (int64, int64) {
	r := l.RefillPerSecond
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 || l.Capacity <= 0 {
		return 0, 0
	}
	const maxExact = 1 << 52
	maxInterval := int64(maxExact) / l.Capacity
	rat, ok := new(big.Rat).SetString(strconv.FormatFloat(r, 'g', -1, 64))
	if !ok {
		return 0, 0
	}
	rat.Quo(rat, big.NewRat(1000, 1))
	if rat.Denom().IsInt64() && rat.Denom().Int64() <= maxInterval && rat.Num().IsInt64() && rat.Num().Int64() < maxExact {
		return rat.Num().Int64(), rat.Denom().Int64()
	}
	return -1, -1 // the continued-fraction fallback, the same code in both
}

func TestRefillRateMatchesBigRat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rates := []float64{1.0 / 3, 1.0 / 60, 1.0 / 3600, 2.0 / 3, 0.1, 0.3, 1e-9, 1e-300, 5e-324,
		1e12, 999999999999.9999, 123456.789012345, 1e15, 1e20, math.MaxFloat64, 7e22, 0.0001234}
	for range 20000 {
		switch rng.IntN(3) {
		case 0:
			rates = append(rates, rng.Float64()*math.Pow(10, float64(rng.IntN(30)-15)))
		case 1:
			rates = append(rates, float64(rng.IntN(1_000_000))/math.Pow(10, float64(rng.IntN(12))))
		default:
			rates = append(rates, math.Float64frombits(rng.Uint64()))
		}
	}
	capacities := []int64{1, 3, 10, 1000, 1_000_000, 1e12, 1 << 40, 1 << 52, 1 << 53}
	for _, r := range rates {
		for _, c := range capacities {
			l := sluice.TokenBucket(c, r)
			wn, wp := refillRateBig(l)
			if wn < 0 {
				continue // decided by bestFraction in both versions
			}
			if n, p := l.RefillRate(); n != wn || p != wp {
				t.Fatalf("capacity %d, %v/s: got %d per %dms, want %d per %dms", c, r, n, p, wn, wp)
			}
		}
	}
}

func TestValidateAllocatesNothing(t *testing.T) {
	req := sluice.Request{Subject: "s", Cost: 1, Limits: []sluice.Limit{
		sluice.TokenBucket(60, 1.0/60).Named("a"),
		sluice.TokenBucket(10, 2.5).Named("b"),
		sluice.SlidingWindow(100, time.Minute).Named("c"),
		sluice.FixedWindow(100, time.Hour).Named("d"),
	}}
	if n := testing.AllocsPerRun(100, func() {
		if err := req.Validate(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Validate allocated %v times per call", n)
	}
}

func TestValidateLimitsReportsTheFirstProblem(t *testing.T) {
	// Limit by limit, in order: a duplicate name before an invalid limit is
	// the error, and an invalid limit before a duplicate is.
	a := sluice.PerSecond(1).Named("a")
	bad := sluice.PerSecond(0).Named("b")
	cases := []struct {
		limits []sluice.Limit
		want   string
	}{
		{[]sluice.Limit{a, a, bad}, `limit name "a" is used twice; each limit of a rule needs its own name`},
		{[]sluice.Limit{a, bad, a}, `limit "b": capacity must be a positive integer, got 0`},
		{[]sluice.Limit{bad.Named("x"), bad.Named("x")}, `limit "x": capacity must be a positive integer, got 0`},
		{[]sluice.Limit{a, a.Named("b"), a.Named("c"), a.Named("b")}, `limit name "b" is used twice; each limit of a rule needs its own name`},
	}
	for _, c := range cases {
		err := sluice.Limits(c.limits).Validate()
		if err == nil || err.Error() != c.want || !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("%v: got %v, want %s", c.limits, err, c.want)
		}
	}
	many := make([]sluice.Limit, sluice.MaxLimits)
	for i := range many {
		many[i] = a.Named("n" + strconv.Itoa(i))
	}
	if err := sluice.Limits(many).Validate(); err != nil {
		t.Fatalf("%d distinct limits: %v", len(many), err)
	}
	many[len(many)-1] = many[0]
	if err := sluice.Limits(many).Validate(); err == nil || !strings.Contains(err.Error(), `"n0" is used twice`) {
		t.Fatalf("duplicate at the end: got %v", err)
	}
}

// TestLimitLeaseValidated: lease "auto" is for rate limits only, and no
// other value is accepted.
func TestLimitLeaseValidated(t *testing.T) {
	for _, l := range []sluice.Limit{sluice.TokenBucket(10, 1), sluice.SlidingWindow(10, time.Minute), sluice.FixedWindow(10, time.Minute)} {
		l.Lease = sluice.LeaseAuto
		if err := l.Validate(); err != nil {
			t.Errorf("%s with lease auto: %v", l.Algorithm, err)
		}
	}
	c := sluice.Concurrency(5, time.Second)
	c.Lease = sluice.LeaseAuto
	if err := c.Validate(); !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "never leases") {
		t.Errorf("concurrency with lease auto: %v", err)
	}
	bad := sluice.PerSecond(5)
	bad.Lease = "always"
	if err := bad.Validate(); !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), `lease must be "auto"`) {
		t.Errorf("lease always: %v", err)
	}
}
