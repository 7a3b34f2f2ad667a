package sluice

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day and Week are the units ParseWindow adds to Go's durations. A day is
// 24 hours, since windows are spans of time, not calendar days.
const (
	Day  = 24 * time.Hour
	Week = 7 * Day
)

// windowUnits are the units of ParseWindow, longest first so "ms" is not
// read as "m".
var windowUnits = []struct {
	suffix string
	unit   time.Duration
}{
	{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"ms", time.Millisecond},
	{"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", Day}, {"w", Week},
}

// ParseWindow reads a window or period as people write it: a Go duration
// ("500ms", "1m", "1h30m") that may also use d (days) and w (weeks), as in
// "1d", "2w", "1.5d" or "1w2d". It is the one parser for every window the
// API, the CLI and the config files take. Zero and negative spans are
// refused, since no window is empty.
func ParseWindow(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration like 500ms, 30s, 1m, 1h, 1d or 1w", s)
	rest := s
	if rest == "" {
		return 0, bad
	}
	var total float64
	for rest != "" {
		// A number: digits with at most one decimal point.
		end := 0
		for end < len(rest) && (rest[end] >= '0' && rest[end] <= '9' || rest[end] == '.') {
			end++
		}
		n, err := strconv.ParseFloat(rest[:end], 64)
		if end == 0 || err != nil {
			return 0, bad
		}
		rest = rest[end:]
		matched := false
		for _, u := range windowUnits {
			if after, ok := strings.CutPrefix(rest, u.suffix); ok {
				total += n * float64(u.unit)
				rest, matched = after, true
				break
			}
		}
		if !matched {
			return 0, bad
		}
	}
	// Durations hold about 292 years; a longer one would wrap around.
	if total >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is longer than the 292 years a window may span", s)
	}
	if d := time.Duration(total); d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%q is not a positive duration", s)
}
