package sluice_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
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
	sluice.SetHeaders(h, "payments", d)
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
		if got := sluice.RetryAfterSeconds(d); got != want {
			t.Errorf("%v: got %d, want %d", d, got, want)
		}
	}
}

func TestSetHeadersQuotesPolicyNames(t *testing.T) {
	h := http.Header{}
	sluice.SetHeaders(h, `we"ird\`, sluice.Decision{Allowed: true, Limit: 1, Limits: []sluice.LimitDecision{{Name: "x", Limit: 1, Window: time.Second}}})
	if got, want := h.Get("RateLimit-Policy"), `"we\"ird\\.x";q=1;w=1`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if h.Get("Retry-After") != "" {
		t.Fatal("Retry-After on an allow")
	}
}

func TestCeilMilliseconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{-time.Second: 0, 0: 0, time.Nanosecond: 1, time.Millisecond: 1, 1001 * time.Microsecond: 2} {
		if got := sluice.CeilMilliseconds(d); got != want {
			t.Errorf("%v: got %d, want %d", d, got, want)
		}
	}
}
