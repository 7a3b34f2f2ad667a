package storetest

import (
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
)

// DrawSmallLimits draws one or two small limits (capacity 1 to 6, windows of
// 1 to 3 seconds, any algorithm), so that property tests see denies often.
func DrawSmallLimits(t *rapid.T) []sluice.Limit {
	n := rapid.IntRange(1, 2).Draw(t, "limits")
	out := make([]sluice.Limit, 0, n)
	for i := range n {
		capacity := int64(rapid.IntRange(1, 6).Draw(t, "capacity"))
		var l sluice.Limit
		switch rapid.IntRange(0, 2).Draw(t, "algorithm") {
		case 0:
			l = sluice.TokenBucket(capacity, float64(rapid.IntRange(1, 4).Draw(t, "refill")))
		case 1:
			l = sluice.SlidingWindow(capacity, time.Duration(rapid.IntRange(1, 3).Draw(t, "window"))*time.Second)
		default:
			l = sluice.FixedWindow(capacity, time.Duration(rapid.IntRange(1, 3).Draw(t, "window"))*time.Second)
		}
		out = append(out, l.Named(string(rune('a'+i))))
	}
	return out
}
