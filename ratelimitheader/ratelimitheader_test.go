package ratelimitheader_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

func TestSetHeaders(t *testing.T) {
	d := sluice.Decision{
		Allowed: false, Limit: 10, Remaining: 0, ResetAfter: 4200 * time.Millisecond, RetryAfter: 1001 * time.Millisecond,
		Limits: []sluice.LimitDecision{
			{Name: "burst", Limit: 10, Remaining: 0, ResetAfter: 4200 * time.Millisecond, RetryAfter: 1001 * time.Millisecond, Window: 5 * time.Second},
			{Name: "hourly", Limit: 1000, Remaining: 990, ResetAfter: time.Hour, Allowed: true, Window: time.Hour},
		},
	}
	h := http.Header{}
	ratelimitheader.Set(h, "payments", d)
	want := map[string]string{
		"RateLimit-Policy":      `"payments.burst";q=10;w=5, "payments.hourly";q=1000;w=3600`,
		"RateLimit":             `"payments.burst";r=0;t=5`,
		"X-RateLimit-Limit":     "10",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "5",
		"Retry-After":           "2",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: got %q, want %q", k, got, v)
		}
	}
}

func TestRetryAfterSecondsNeverZeroOnADeny(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, time.Minute: 60} {
		if got := ratelimitheader.RetryAfterSeconds(d); got != want {
			t.Errorf("%v: got %d, want %d", d, got, want)
		}
	}
}

func TestSetHeadersQuotesPolicyNames(t *testing.T) {
	h := http.Header{}
	ratelimitheader.Set(h, `we"ird\`, sluice.Decision{Allowed: true, Limit: 1, Limits: []sluice.LimitDecision{{Name: "x", Limit: 1, Window: time.Second}}})
	if got, want := h.Get("RateLimit-Policy"), `"we\"ird\\.x";q=1;w=1`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if h.Get("Retry-After") != "" {
		t.Fatal("Retry-After on an allow")
	}
}

// The RateLimit field names the limit Combine chose, even when another
// limit shows the same figures.
func TestSetNamesTheBindingLimit(t *testing.T) {
	twin := sluice.LimitDecision{Limit: 5, Remaining: 2, ResetAfter: time.Second, Allowed: true, Window: time.Second}
	first, second := twin, twin
	first.Name, second.Name = "first", "second"
	d := sluice.Decision{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: time.Second,
		Limits: []sluice.LimitDecision{first, second}, Binding: 1}
	h := http.Header{}
	ratelimitheader.Set(h, "r", d)
	if got, want := h.Get("RateLimit"), `"r.second";r=2;t=1`; got != want {
		t.Fatalf("RateLimit %s, want %s", got, want)
	}
}
