package sluice

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Algorithm names a rate-limiting algorithm. The string values are the ones used
// in configuration and in the HTTP API.
type Algorithm string

const (
	AlgorithmTokenBucket   Algorithm = "token_bucket"
	AlgorithmSlidingWindow Algorithm = "sliding_window"
	AlgorithmFixedWindow   Algorithm = "fixed_window"
	// AlgorithmConcurrency limits units held at once rather than per time:
	// see Concurrency and holds.go.
	AlgorithmConcurrency Algorithm = "concurrency"
	// AlgorithmCredits: see credits.go.
)

// Valid reports whether a is one of the known algorithms.
func (a Algorithm) Valid() bool {
	switch a {
	case AlgorithmTokenBucket, AlgorithmSlidingWindow, AlgorithmFixedWindow, AlgorithmConcurrency, AlgorithmCredits:
		return true
	}
	return false
}

// maxExact bounds every integer a store computes with: Redis runs its scripts
// with Lua numbers, IEEE doubles, exact up to 2^53; half of that leaves room
// for sums of two such values.
const maxExact = 1 << 52

// Limit is one limit of a check. Build it with TokenBucket, SlidingWindow or
// FixedWindow, optionally Named; the zero value is not a valid limit.
//
// For a token bucket, Capacity is the bucket size and RefillPerSecond the
// refill rate. For the window algorithms, Capacity is the number of units
// allowed per Window.
type Limit struct {
	Name            string
	Algorithm       Algorithm
	Capacity        int64
	RefillPerSecond float64
	Window          time.Duration
	// TTL is a concurrency limit's lease time: a lease not released or
	// extended by then is freed (see Concurrency).
	TTL time.Duration
	// Lease, when LeaseAuto, lets the check engine serve the limit from
	// quota leases while one of its keys is hot at an instance (see
	// leases.go); "" never leases. Only rate limits lease. A rule leases
	// only if every limit of it says LeaseAuto.
	Lease string
	// Calendar, on a fixed_window, makes its windows calendar days or
	// months (with Window 0) in TimeZone, an IANA name ("Europe/Berlin";
	// "" is UTC), so a quota resets at midnight on the wall clock.
	Calendar Calendar
	TimeZone string
	// Refill is a credits limit's refill schedule (see credits.go).
	Refill Refill
}

// LeaseAuto is the Limit.Lease that opts a limit in to quota leasing.
const LeaseAuto = "auto"

// TokenBucket returns a token-bucket limit: a bucket of capacity tokens,
// initially full, refilled continuously at refillPerSecond tokens per second.
func TokenBucket(capacity int64, refillPerSecond float64) Limit {
	return Limit{Name: "token_bucket", Algorithm: AlgorithmTokenBucket, Capacity: capacity, RefillPerSecond: refillPerSecond}
}

// SlidingWindow returns a limit of limit units per rolling window.
func SlidingWindow(limit int64, window time.Duration) Limit {
	return Limit{Name: "sliding_window", Algorithm: AlgorithmSlidingWindow, Capacity: limit, Window: window}
}

// FixedWindow returns a limit of limit units per window, windows aligned to the
// Unix epoch.
func FixedWindow(limit int64, window time.Duration) Limit {
	return Limit{Name: "fixed_window", Algorithm: AlgorithmFixedWindow, Capacity: limit, Window: window}
}

// PerSecond is a token bucket of n tokens refilled at n per second.
func PerSecond(n int64) Limit { return TokenBucket(n, float64(n)) }

// PerMinute is a sliding window of n per minute.
func PerMinute(n int64) Limit { return SlidingWindow(n, time.Minute) }

// PerHour is a sliding window of n per hour.
func PerHour(n int64) Limit { return SlidingWindow(n, time.Hour) }

// Named returns a copy of l with the given name. Names distinguish the limits of
// one check, in decisions and in the keys that hold their counters.
func (l Limit) Named(name string) Limit {
	l.Name = name
	return l
}

// validLimitName reports whether name is 1-64 of [A-Za-z0-9_.-], starting
// with a letter or digit: safe inside keys, metrics and headers.
func validLimitName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '_' || c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Validate reports what is wrong with l, in a sentence a user understands.
func (l Limit) Validate() error {
	if !validLimitName(l.Name) {
		return invalidf("limit name %q must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", l.Name)
	}
	switch l.Lease {
	case "":
	case LeaseAuto:
		if l.Algorithm == AlgorithmConcurrency {
			return invalidf("limit %q: a concurrency limit never leases; lease \"auto\" is for token_bucket, sliding_window and fixed_window limits", l.Name)
		}
		if l.Calendar != "" {
			return invalidf("limit %q: a calendar window never leases; lease \"auto\" is for windows of a fixed span", l.Name)
		}
	default:
		return invalidf("limit %q: lease must be \"auto\" or absent, got %q", l.Name, truncate(l.Lease, 64))
	}
	if l.Refill != (Refill{}) && l.Algorithm != AlgorithmCredits {
		return invalidf("limit %q: only a credits limit has a refill; a %s limit refills by its own parameters", l.Name, l.Algorithm)
	}
	if l.Calendar != "" && l.Algorithm != AlgorithmFixedWindow {
		return invalidf("limit %q: only a fixed_window takes a calendar window (\"day\" or \"month\")", l.Name)
	}
	if l.TimeZone != "" && l.Calendar == "" {
		return invalidf("limit %q: a time_zone applies to a calendar window (\"window\": \"day\" or \"month\") only", l.Name)
	}
	switch l.Algorithm {
	case AlgorithmCredits:
		return l.validateCredits()
	case AlgorithmTokenBucket:
		if l.Capacity <= 0 {
			return invalidf("limit %q: capacity must be a positive integer, got %d", l.Name, l.Capacity)
		}
		if l.Capacity > 1e12 {
			return invalidf("limit %q: capacity %d is too large (at most 10^12)", l.Name, l.Capacity)
		}
		r := l.RefillPerSecond
		if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
			return invalidf("limit %q: refill_per_second must be a positive number, got %v", l.Name, r)
		}
		if r > 1e12 {
			return invalidf("limit %q: refill_per_second %v is too large (at most 10^12)", l.Name, r)
		}
		if l.Window != 0 {
			return invalidf("limit %q: a token bucket has no window; use refill_per_second", l.Name)
		}
		if _, p := l.RefillRate(); p == 0 {
			return invalidf("limit %q: refill_per_second %v is too small for capacity %d", l.Name, r, l.Capacity)
		}
	case AlgorithmSlidingWindow, AlgorithmFixedWindow:
		if l.Capacity <= 0 {
			return invalidf("limit %q: limit must be a positive integer, got %d", l.Name, l.Capacity)
		}
		if l.Calendar != "" {
			if err := l.validateCalendar(); err != nil {
				return err
			}
		} else if l.Window < time.Millisecond {
			return invalidf("limit %q: window must be at least 1ms, got %v", l.Name, l.Window)
		}
		if l.Window%time.Millisecond != 0 {
			return invalidf("limit %q: window must be a whole number of milliseconds, got %v", l.Name, l.Window)
		}
		if l.RefillPerSecond != 0 {
			return invalidf("limit %q: a %s limit has no refill rate; use limit and window", l.Name, l.Algorithm)
		}
		// The sliding window sums prev*(W-elapsed) + (curr+cost)*W, up to
		// three times limit*W, and must stay exact. A fixed window only adds
		// counts.
		if l.Algorithm == AlgorithmSlidingWindow && float64(l.Capacity)*float64(l.Window.Milliseconds()) >= maxExact/4 {
			return invalidf("limit %q: limit %d × window %v is too large to count exactly; use a shorter window or a fixed_window", l.Name, l.Capacity, l.Window)
		}
		if l.Capacity > maxExact/4 {
			return invalidf("limit %q: limit %d is too large (at most %d)", l.Name, l.Capacity, int64(maxExact/4))
		}
	case AlgorithmConcurrency:
		return l.validateConcurrency()
	case "":
		return invalidf("limit %q: algorithm is required (token_bucket, sliding_window, fixed_window, concurrency or credits)", l.Name)
	default:
		return invalidf("limit %q: unknown algorithm %q (want token_bucket, sliding_window, fixed_window, concurrency or credits)", l.Name, l.Algorithm)
	}
	if l.TTL != 0 {
		return invalidf("limit %q: only a concurrency limit has a ttl", l.Name)
	}
	return nil
}

// RefillRate returns the token bucket's refill rate as an exact fraction:
// tokens tokens every intervalMs milliseconds, refilled continuously. Stores
// count in units of 1/intervalMs token so that all their arithmetic is on
// integers and every store reaches identical decisions. A rate that is not a
// short decimal is approximated by the closest fraction the stores can hold.
// It returns (0, 0) when the rate is not positive.
func (l Limit) RefillRate() (tokens, intervalMs int64) {
	r := l.RefillPerSecond
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 || l.Capacity <= 0 {
		return 0, 0
	}
	maxInterval := int64(maxExact) / l.Capacity
	// Fast path for rates with at most three decimals (10, 2.5, 0.125): r is
	// m/1000 tokens per second, m/10^6 per millisecond. It gives the same
	// fraction as the general path below, without allocating.
	if m := math.Round(r * 1000); m > 0 && m < maxExact && m/1000 == r {
		num, den := int64(m), int64(1_000_000)
		g := gcd(num, den)
		num, den = num/g, den/g
		if den <= maxInterval {
			return num, den
		}
	}
	// tokens per millisecond = r/1000, as the shortest decimal that reads back
	// as r, in lowest terms. The scaled bucket holds up to capacity*interval
	// units.
	if num, den, ok := decimalFraction(r); ok && den <= maxInterval && num < maxExact {
		return num, den
	}
	return bestFraction(r/1000, maxInterval)
}

// decimalFraction returns r/1000 as the fraction num/den in lowest terms, r
// read as the shortest decimal that reads back as r, or ok = false when num
// or den does not fit in an int64. It allocates nothing (Validate and the
// stores call RefillRate on every check).
func decimalFraction(r float64) (num, den int64, ok bool) {
	var buf [32]byte
	// d.ddddde±xx: at most 17 significant digits, which fit in a uint64.
	s := strconv.AppendFloat(buf[:0], r, 'e', -1, 64)
	e := bytes.IndexByte(s, 'e')
	if e < 0 {
		return 0, 0, false
	}
	exp, neg := 0, false
	for _, c := range s[e+1:] {
		switch {
		case c == '-':
			neg = true
		case c >= '0' && c <= '9':
			exp = exp*10 + int(c-'0')
		}
	}
	if neg {
		exp = -exp
	}
	var m uint64
	digits := 0
	for _, c := range s[:e] {
		if c >= '0' && c <= '9' {
			m = m*10 + uint64(c-'0')
			digits++
		}
	}
	if m == 0 || m >= 1<<62 {
		return 0, 0, false
	}
	// r/1000 = m × 10^k.
	k := exp - (digits - 1) - 3
	if k >= 0 {
		for ; k > 0; k-- {
			if m > math.MaxInt64/10 {
				return 0, 0, false
			}
			m *= 10
		}
		return int64(m), 1, true
	}
	// den = 10^-k = 2^-k × 5^-k; cancel the factors of 2 and 5 m shares.
	twos, fives := -k, -k
	for twos > 0 && m%2 == 0 {
		m /= 2
		twos--
	}
	for fives > 0 && m%5 == 0 {
		m /= 5
		fives--
	}
	d := uint64(1)
	for ; twos > 0; twos-- {
		if d > math.MaxInt64/2 {
			return 0, 0, false
		}
		d *= 2
	}
	for ; fives > 0; fives-- {
		if d > math.MaxInt64/5 {
			return 0, 0, false
		}
		d *= 5
	}
	return int64(m), int64(d), true
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// bestFraction returns the continued-fraction approximation p/q of x with
// q <= maxQ.
func bestFraction(x float64, maxQ int64) (int64, int64) {
	p0, q0, p1, q1 := int64(0), int64(1), int64(1), int64(0)
	v := x
	for i := 0; i < 64; i++ {
		a := int64(math.Floor(v))
		p2, q2 := a*p1+p0, a*q1+q0
		if q2 > maxQ || p2 >= maxExact || q2 <= 0 {
			break
		}
		p0, q0, p1, q1 = p1, q1, p2, q2
		frac := v - float64(a)
		if frac < 1e-12 {
			break
		}
		v = 1 / frac
	}
	if q1 == 0 || p1 == 0 {
		return 0, 0
	}
	return p1, q1
}

// String describes l in words, for logs and test failures:
// "burst: token bucket of 10, refill 2/s".
func (l Limit) String() string {
	switch l.Algorithm {
	case AlgorithmTokenBucket:
		return fmt.Sprintf("%s: token bucket of %d, refill %s/s", l.Name, l.Capacity, strconv.FormatFloat(l.RefillPerSecond, 'g', -1, 64))
	case AlgorithmSlidingWindow:
		return fmt.Sprintf("%s: %d per sliding %s", l.Name, l.Capacity, FormatWindow(l.Window))
	case AlgorithmFixedWindow:
		if l.Calendar != "" {
			zone := l.TimeZone
			if zone == "" {
				zone = "UTC"
			}
			return fmt.Sprintf("%s: %d per calendar %s (%s)", l.Name, l.Capacity, l.Calendar, zone)
		}
		return fmt.Sprintf("%s: %d per fixed %s", l.Name, l.Capacity, FormatWindow(l.Window))
	case AlgorithmCredits:
		return l.creditsString()
	case AlgorithmConcurrency:
		return fmt.Sprintf("%s: %d at once, lease %s", l.Name, l.Capacity, FormatWindow(l.TTL))
	}
	return fmt.Sprintf("%s: invalid limit (algorithm %q)", l.Name, l.Algorithm)
}

// FormatWindow writes a window the way people write it: "1h", "1m30s",
// "250ms", rather than time.Duration's "1h0m0s".
func FormatWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Limits are the limits of one check, checked together.
type Limits []Limit

// Validate checks a set of limits for one check, in a sentence: at least
// one, each valid, names unique.
func (limits Limits) Validate() error {
	if len(limits) == 0 {
		return invalidf("at least one limit is required")
	}
	if len(limits) > MaxLimits {
		return invalidf("at most %d limits may be checked together, got %d", MaxLimits, len(limits))
	}
	// At most MaxLimits (16) names: comparing each with the ones before it
	// is cheaper than a map and allocates nothing, and reports the same
	// first error, in the same order, as checking limit by limit.
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			return err
		}
		for _, prev := range limits[:i] {
			if prev.Name == l.Name {
				return invalidf("limit name %q is used twice; each limit of a rule needs its own name", l.Name)
			}
		}
	}
	return nil
}

// MaxLimits is the most limits one check may name.
const MaxLimits = 16

func invalidf(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
}

// InvalidError is returned for input that can never be valid: a malformed limit,
// a negative cost, a cost that can never fit. It wraps ErrInvalid.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Domain errors. The HTTP layer maps them to status codes in one place.
var (
	// ErrInvalid marks bad input; the message says what was wrong.
	ErrInvalid = errors.New("invalid input")
	// ErrStoreUnavailable marks a store that could not answer in time.
	ErrStoreUnavailable = errors.New("rate-limit store unavailable")
	// ErrStoreFull marks, beside ErrStoreUnavailable, a store that answers
	// but has no room for a new counter (the memory store at its budgets):
	// counters it holds are still decided.
	ErrStoreFull = errors.New("rate-limit store full")
	// ErrStoreConnecting marks, beside ErrStoreUnavailable, a store that has
	// not connected since the process started: it keeps trying in the
	// background.
	ErrStoreConnecting = errors.New("not connected yet")
	// ErrNotFound marks a missing tenant, key or rule.
	ErrNotFound = errors.New("not found")
	// ErrConflict marks a name that is already taken.
	ErrConflict = errors.New("already exists")
	// ErrTenantCap marks a create that would take a tenant past one of the
	// catalog's TenantCaps; it succeeds once something is deleted.
	ErrTenantCap = errors.New("tenant cap reached")
	// ErrCatalogReadOnly marks a change the catalog database refused
	// because it cannot write (a read-only file or file system, a
	// PostgreSQL in read-only mode or a standby): reads still work.
	ErrCatalogReadOnly = errors.New("the catalog database is read-only")
)

// PolicyWindow is the time window a limit's quota refers to: the window, or for
// a token bucket the time an empty bucket takes to fill.
func PolicyWindow(l Limit) time.Duration {
	if l.Algorithm == AlgorithmTokenBucket {
		if l.RefillPerSecond <= 0 {
			return 0
		}
		return time.Duration(math.Ceil(float64(l.Capacity) / l.RefillPerSecond * float64(time.Second)))
	}
	if l.Algorithm == AlgorithmConcurrency {
		return l.TTL
	}
	if l.Calendar == CalendarDay || l.Algorithm == AlgorithmCredits && l.Refill.Every == CalendarDay {
		return Day
	}
	if l.Calendar == CalendarMonth || l.Algorithm == AlgorithmCredits && l.Refill.Every == CalendarMonth {
		return 30 * Day // a nominal month: policy headers carry one number
	}
	if l.Algorithm == AlgorithmCredits {
		return l.Refill.Period
	}
	return l.Window
}

// validateCalendar checks a calendar fixed_window's period and zone.
func (l Limit) validateCalendar() error {
	if !l.Calendar.Valid() {
		return invalidf("limit %q: a calendar window is \"day\" or \"month\", got %q", l.Name, truncate(string(l.Calendar), 64))
	}
	if l.Window != 0 {
		return invalidf("limit %q: a calendar window has no window span besides its calendar period", l.Name)
	}
	if _, err := loadLocation(l.TimeZone); err != nil {
		return invalidf("limit %q: time_zone %q is not a known IANA time zone (like \"Europe/Berlin\" or \"UTC\")", l.Name, truncate(l.TimeZone, 64))
	}
	return nil
}
