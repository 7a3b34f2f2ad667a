package sluice

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseLimitSpec reads a limit of algorithm algo in the compact form people
// type on a command line (sluice rule set --token-bucket 10:2/s), so every
// tool that takes one reads it the same way:
//
//   - token_bucket: [NAME=]CAPACITY:RATE/UNIT, "10:2/s" (a bucket of 10
//     refilled at 2 per second) or "burst=100:30/m";
//   - sliding_window, fixed_window: [NAME=]LIMIT/WINDOW, "600/1m" or
//     "daily=5000/d";
//   - concurrency: [NAME=]LIMIT/TTL, "10/30s" (at most 10 held at once, each
//     lease freed after 30 seconds).
//
// A unit or window is a bare s, m, h, d or w, or anything ParseWindow reads
// ("500ms", "2d"). The name defaults to the algorithm. The limit is
// validated; errors say what is wrong and how to write it, without the
// spec, which the caller names with its flag.
func ParseLimitSpec(algo Algorithm, spec string) (Limit, error) {
	name, value := string(algo), spec
	if n, v, ok := strings.Cut(spec, "="); ok {
		name, value = n, v
	}
	var l Limit
	var err error
	switch algo {
	case AlgorithmTokenBucket:
		l, err = parseTokenBucketSpec(value)
	case AlgorithmSlidingWindow, AlgorithmFixedWindow:
		n, window, perr := parseCountSpec(value, "window", "[NAME=]LIMIT/WINDOW, e.g. 600/1m")
		l, err = Limit{Algorithm: algo, Capacity: n, Window: window}, perr
	case AlgorithmConcurrency:
		n, ttl, perr := parseCountSpec(value, "lease ttl", "[NAME=]LIMIT/TTL, e.g. 10/30s")
		l, err = Concurrency(n, ttl), perr
	default:
		return Limit{}, fmt.Errorf("algorithm %q has no compact form", algo)
	}
	if err != nil {
		return Limit{}, err
	}
	l = l.Named(name)
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// parseTokenBucketSpec reads CAPACITY:RATE/UNIT.
func parseTokenBucketSpec(value string) (Limit, error) {
	bad := func(why string) error {
		return fmt.Errorf("%s; write [NAME=]CAPACITY:RATE/s, e.g. 10:2/s", why)
	}
	capText, rateText, ok := strings.Cut(value, ":")
	if !ok {
		return Limit{}, bad("missing ':' between capacity and refill rate")
	}
	capacity, err := strconv.ParseInt(capText, 10, 64)
	if err != nil {
		return Limit{}, bad(fmt.Sprintf("capacity %q is not a whole number", capText))
	}
	amountText, per, ok := strings.Cut(rateText, "/")
	if !ok {
		return Limit{}, bad(fmt.Sprintf("refill rate %q has no unit", rateText))
	}
	amount, err := strconv.ParseFloat(amountText, 64)
	if err != nil {
		return Limit{}, bad(fmt.Sprintf("refill amount %q is not a number", amountText))
	}
	period, err := parseSpecPeriod(per)
	if err != nil {
		return Limit{}, bad(err.Error())
	}
	return TokenBucket(capacity, amount/period.Seconds()), nil
}

// parseCountSpec reads LIMIT/PERIOD, the period being what the algorithm
// calls it (a window, a lease ttl).
func parseCountSpec(value, period, form string) (int64, time.Duration, error) {
	bad := func(why string) error { return fmt.Errorf("%s; write %s", why, form) }
	limitText, periodText, ok := strings.Cut(value, "/")
	if !ok {
		return 0, 0, bad("missing '/' between the limit and the " + period)
	}
	n, err := strconv.ParseInt(limitText, 10, 64)
	if err != nil {
		return 0, 0, bad(fmt.Sprintf("limit %q is not a whole number", limitText))
	}
	d, err := parseSpecPeriod(periodText)
	if err != nil {
		return 0, 0, bad(err.Error())
	}
	return n, d, nil
}

// parseSpecPeriod reads a bare unit (s, m, h, d, w, as in "10/s" or
// "5000/d") or any window ParseWindow reads (500ms, 1m, 2d, 1w).
func parseSpecPeriod(s string) (time.Duration, error) {
	if unit, ok := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": Day, "w": Week}[s]; ok {
		return unit, nil
	}
	return ParseWindow(s)
}
