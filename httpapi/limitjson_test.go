package httpapi

import (
	"testing"
	"time"
)

// A lease TTL is written like any window: days and weeks included.
func TestConcurrencyTTLTakesDaysAndWeeks(t *testing.T) {
	limit := int64(3)
	for ttl, want := range map[string]time.Duration{"45s": 45 * time.Second, "1d": 24 * time.Hour, "1w": 7 * 24 * time.Hour} {
		l, err := LimitJSON{Name: "inflight", Algorithm: "concurrency", Limit: &limit, TTL: ttl}.ToLimit()
		if err != nil || l.TTL != want {
			t.Errorf("ttl %q: %v, %v; want %v", ttl, l.TTL, err, want)
		}
	}
	if _, err := (LimitJSON{Name: "inflight", Algorithm: "concurrency", Limit: &limit, TTL: "soon"}).ToLimit(); err == nil {
		t.Error("ttl \"soon\" was accepted")
	}
}
