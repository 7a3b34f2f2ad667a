package httpapi

import (
	"testing"
	"time"
)

// A lease TTL is written like any window, days included (a TTL is at most a
// day, so a week is refused by the limit's own validation).
func TestConcurrencyTTLTakesDays(t *testing.T) {
	limit := int64(3)
	for ttl, want := range map[string]time.Duration{"45s": 45 * time.Second, "1d": 24 * time.Hour, "0.5d": 12 * time.Hour} {
		l, err := LimitJSON{Name: "inflight", Algorithm: "concurrency", Limit: &limit, TTL: ttl}.ToLimit()
		if err != nil || l.TTL != want {
			t.Errorf("ttl %q: %v, %v; want %v", ttl, l.TTL, err, want)
		}
	}
	for _, ttl := range []string{"soon", "1w"} {
		if _, err := (LimitJSON{Name: "inflight", Algorithm: "concurrency", Limit: &limit, TTL: ttl}).ToLimit(); err == nil {
			t.Errorf("ttl %q was accepted", ttl)
		}
	}
}
