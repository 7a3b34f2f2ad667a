package redis

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// referenceCall is how Check built its keys and arguments before buildCall.
func referenceCall(prefix string, req sluice.Request) ([]string, []string) {
	keys := sluice.Keys(prefix, req)
	now := ""
	if !req.Now.IsZero() {
		now = strconv.FormatInt(req.Now.UnixMilli(), 10)
	}
	args := []string{now, strconv.FormatInt(req.Cost, 10)}
	for _, l := range req.Limits {
		capacity := strconv.FormatInt(l.Capacity, 10)
		switch l.Algorithm {
		case sluice.AlgorithmTokenBucket:
			n, p := l.RefillRate()
			args = append(args, "t", capacity, strconv.FormatInt(n, 10), strconv.FormatInt(p, 10))
		case sluice.AlgorithmSlidingWindow:
			args = append(args, "s", capacity, strconv.FormatInt(l.Window.Milliseconds(), 10), "0")
		default:
			args = append(args, "f", capacity, strconv.FormatInt(l.Window.Milliseconds(), 10), "0")
		}
	}
	return keys, args
}

func TestBuildCallMatchesReference(t *testing.T) {
	limits := []sluice.Limit{
		sluice.TokenBucket(10, 1).Named("burst"),
		sluice.TokenBucket(1e12, 1.0/3).Named("third"),
		sluice.SlidingWindow(5, time.Minute).Named("m"),
		sluice.FixedWindow(1<<40, 1500*time.Millisecond).Named(strings.Repeat("x", 64)),
		sluice.PerSecond(3),
	}
	for i := len(limits); i < sluice.MaxLimits; i++ {
		limits = append(limits, sluice.PerHour(int64(i)).Named("h"+strconv.Itoa(i)))
	}
	parts := []string{"", "a", "{}:", strings.Repeat("é", 200), strings.Repeat("s", 489), strings.Repeat("s", 70_000)}
	for _, prefix := range []string{"sluice:", "", strings.Repeat("p", 300)} {
		for _, subject := range parts {
			for _, n := range []int{1, 2, 5, sluice.MaxLimits} {
				for _, now := range []time.Time{{}, time.UnixMilli(1_700_000_000_123)} {
					for _, cost := range []int64{0, 1, 123456789} {
						req := sluice.Request{Tenant: "acme", Rule: subject[:min(len(subject), 3)], Subject: subject, Limits: limits[:n], Cost: cost, Now: now}
						wantKeys, wantArgs := referenceCall(prefix, req)
						c := buildCall(prefix, req)
						if !slices.Equal(c.keys, wantKeys) || !slices.Equal(c.args, wantArgs) {
							t.Fatalf("prefix %q, %d limits, %d-byte subject:\ngot  %q %q\nwant %q %q", prefix, n, len(subject), c.keys, c.args, wantKeys, wantArgs)
						}
					}
				}
			}
		}
	}
}

func TestBuildCallAllocatesTwice(t *testing.T) {
	req := sluice.Request{Rule: "bench", Subject: "user-1234", Cost: 1, Limits: []sluice.Limit{
		sluice.TokenBucket(1_000_000, 1_000_000).Named("burst"),
		sluice.SlidingWindow(1_000_000, time.Minute).Named("minute"),
		sluice.FixedWindow(1_000_000, time.Hour).Named("hour"),
	}}
	if n := testing.AllocsPerRun(100, func() { buildCall("sluice:", req) }); n > 2 {
		t.Fatalf("buildCall allocated %v times, want 2", n)
	}
}
