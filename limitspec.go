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
//     lease freed after 30 seconds);
//   - fixed_window by the calendar: [NAME=]LIMIT/day or LIMIT/month, with
//     @ZONE for a time zone other than UTC, "1000000/month@Europe/Berlin";
//   - credits: [NAME=]AMOUNT/EVERY[:set|add[:MAX]], "1000/month" (restored
//     to 1000 on the 1st, UTC), "5/12h:add:50", or "none" for a balance
//     only top-ups raise.
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
	case AlgorithmCredits:
		l, err = parseCreditsSpec(value)
	case AlgorithmFixedWindow:
		if l, err = parseCalendarSpec(value); l.Calendar != "" || err != nil {
			break
		}
		n, window, perr := parseCountSpec(value, "window", "[NAME=]LIMIT/WINDOW, e.g. 600/1m")
		l, err = Limit{Algorithm: algo, Capacity: n, Window: window}, perr
	case AlgorithmSlidingWindow:
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

// parseCalendarSpec reads LIMIT/day or LIMIT/month, optionally @ZONE; it
// returns a limit without a Calendar for any other window.
func parseCalendarSpec(value string) (Limit, error) {
	limitText, period, ok := strings.Cut(value, "/")
	if !ok {
		return Limit{}, nil
	}
	period, zone, _ := strings.Cut(period, "@")
	if !Calendar(period).Valid() {
		return Limit{}, nil
	}
	n, err := strconv.ParseInt(limitText, 10, 64)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q is not a whole number; write [NAME=]LIMIT/month[@ZONE], e.g. 1000000/month@Europe/Berlin", limitText)
	}
	return Limit{Algorithm: AlgorithmFixedWindow, Capacity: n, Calendar: Calendar(period), TimeZone: zone}, nil
}

// parseCreditsSpec reads AMOUNT/EVERY[:MODE[:MAX]] or "none".
func parseCreditsSpec(value string) (Limit, error) {
	bad := func(why string) error {
		return fmt.Errorf("%s; write [NAME=]AMOUNT/EVERY[:set|add[:MAX]], e.g. 1000/month or 5/12h:add:50, or none", why)
	}
	if value == "none" {
		return Credits(Refill{}), nil
	}
	amountText, rest, ok := strings.Cut(value, "/")
	if !ok {
		return Limit{}, bad("missing '/' between the refill amount and its period")
	}
	amount, err := strconv.ParseInt(amountText, 10, 64)
	if err != nil {
		return Limit{}, bad(fmt.Sprintf("refill amount %q is not a whole number", amountText))
	}
	parts := strings.Split(rest, ":")
	if len(parts) > 3 {
		return Limit{}, bad("too many ':' parts")
	}
	r := Refill{Amount: amount, Mode: RefillSet}
	if err := r.SetEvery(parts[0]); err != nil {
		return Limit{}, bad(err.Error())
	}
	if len(parts) > 1 {
		r.Mode = RefillMode(parts[1])
	}
	if len(parts) > 2 {
		if r.Max, err = strconv.ParseInt(parts[2], 10, 64); err != nil {
			return Limit{}, bad(fmt.Sprintf("max %q is not a whole number", parts[2]))
		}
	}
	return Credits(r), nil
}
