package memory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestKeysMatchSluiceKeys(t *testing.T) {
	limits := []sluice.Limit{
		sluice.TokenBucket(10, 1).Named("burst"),
		sluice.SlidingWindow(5, time.Minute).Named("m"),
		sluice.FixedWindow(5, 1500*time.Millisecond).Named(strings.Repeat("x", 64)),
		sluice.PerSecond(3),
	}
	parts := []string{"", "a", "acme", "{}:", strings.Repeat("é", 200), strings.Repeat("s", 480), strings.Repeat("s", 489), strings.Repeat("s", 70_000)}
	for _, tenant := range parts[:4] {
		for _, rule := range parts[:5] {
			for _, subject := range parts {
				var stack [64]byte
				keys := buildKeys(stack[:0], tenant, rule, subject, limits)
				tag := sluice.SubjectTag(tenant, rule, subject)
				if got := string(keys.tag()); got != tag {
					t.Fatalf("tag of (%q, %q, %d-byte subject): got %q, want %q", tenant, rule, len(subject), got, tag)
				}
				for i, l := range limits {
					if got, want := string(keys.key(i)), sluice.LimitKey("", tag, l); got != want {
						t.Fatalf("key of %v: got %q, want %q", l, got, want)
					}
				}
			}
		}
	}
}

func TestCheckAllocatesOnlyTheDecision(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	ctx := context.Background()
	req := sluice.Request{Tenant: "t", Rule: "r", Subject: "user-12345", Cost: 1, Limits: []sluice.Limit{
		sluice.TokenBucket(1_000_000, 1_000_000).Named("burst"),
		sluice.SlidingWindow(1_000_000, time.Minute).Named("minute"),
		sluice.FixedWindow(1_000_000, time.Hour).Named("hour"),
	}}
	if _, err := s.Check(ctx, req); err != nil { // creates the counters
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(200, func() {
		if _, err := s.Check(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Fatalf("a check of existing counters allocated %v times, want 1 (Decision.Limits)", n)
	}
}
