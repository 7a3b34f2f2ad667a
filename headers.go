package sluice

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// SetHeaders writes the rate-limit headers of d on h, under policy name
// policy (usually the rule's name): the IETF RateLimit-Policy and RateLimit
// fields in the structured-field syntax of draft-ietf-httpapi-ratelimit-headers
// (10), the widespread X-RateLimit-Limit, -Remaining and -Reset (seconds), and
// Retry-After on a deny. Every writer of these headers (service, middleware,
// gateway) goes through here, so they always agree.
//
// Seconds are rounded up, so a client that waits them is never early, and
// Retry-After is at least 1 on a deny.
func SetHeaders(h http.Header, policy string, d Decision) {
	SetHeadersWithPolicy(h, policy, "", d)
}

// PolicyHeader returns the RateLimit-Policy value of a check of limits under
// policy name policy: the same for every answer of a rule, so callers that
// answer many checks of one rule compute it once (SetHeadersWithPolicy).
func PolicyHeader(policy string, limits []Limit) string {
	buf := make([]byte, 0, 64*len(limits))
	for i, l := range limits {
		buf = appendPolicyItem(buf, i, policy, l.Name, l.Capacity, PolicyWindow(l), l.Algorithm == AlgorithmConcurrency)
	}
	return string(buf)
}

func appendPolicyItem(buf []byte, i int, policy, name string, limit int64, window time.Duration, concurrent bool) []byte {
	if i > 0 {
		buf = append(buf, ", "...)
	}
	buf = appendSFString(buf, policy, name)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, limit, 10)
	if concurrent {
		// A quota of requests in flight has no window (draft-ietf-httpapi-
		// ratelimit-headers, quota unit "concurrent-requests").
		return append(buf, `;qu="concurrent-requests"`...)
	}
	buf = append(buf, ";w="...)
	return strconv.AppendInt(buf, max(1, CeilSeconds(window)), 10)
}

// SetHeadersWithPolicy is SetHeaders with the RateLimit-Policy value given
// (from PolicyHeader over the limits d was decided under); "" computes it from
// d.
func SetHeadersWithPolicy(h http.Header, policy, policyValue string, d Decision) {
	if len(d.Limits) == 0 {
		return
	}
	// One buffer for every value, one slice for every header, and canonical
	// keys assigned directly: this runs on every request.
	buf := make([]byte, 0, 64*len(d.Limits)+96)
	if policyValue == "" {
		for i, ld := range d.Limits {
			buf = appendPolicyItem(buf, i, policy, ld.Name, ld.Limit, ld.Window, ld.Algorithm == AlgorithmConcurrency)
		}
	}
	policyEnd := len(buf)

	name := ""
	for _, ld := range d.Limits {
		if ld.Limit == d.Limit && ld.Remaining == d.Remaining && ld.ResetAfter == d.ResetAfter {
			name = ld.Name
			break
		}
	}
	reset := CeilSeconds(d.ResetAfter)
	buf = appendSFString(buf, policy, name)
	buf = append(buf, ";r="...)
	buf = strconv.AppendInt(buf, d.Remaining, 10)
	buf = append(buf, ";t="...)
	buf = strconv.AppendInt(buf, reset, 10)
	rateLimitEnd := len(buf)
	buf = strconv.AppendInt(buf, d.Limit, 10)
	limitEnd := len(buf)
	buf = strconv.AppendInt(buf, d.Remaining, 10)
	remainingEnd := len(buf)
	buf = strconv.AppendInt(buf, reset, 10)
	resetEnd := len(buf)
	if !d.Allowed {
		buf = strconv.AppendInt(buf, RetryAfterSeconds(d.RetryAfter), 10)
	}
	all := string(buf)
	if policyValue == "" {
		policyValue = all[:policyEnd]
	}
	values := []string{policyValue, all[policyEnd:rateLimitEnd], all[rateLimitEnd:limitEnd],
		all[limitEnd:remainingEnd], all[remainingEnd:resetEnd], all[resetEnd:]}
	// Each header gets a one-element slice of values, capped so that an
	// Add to one never writes into the next.
	h[headerPolicy] = values[0:1:1]
	h[headerRateLimit] = values[1:2:2]
	h[headerXLimit] = values[2:3:3]
	h[headerXRemaining] = values[3:4:4]
	h[headerXReset] = values[4:5:5]
	if !d.Allowed {
		h[headerRetryAfter] = values[5:6:6]
	}
}

// The headers SetHeaders writes, in canonical form.
var (
	headerPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	headerRateLimit  = http.CanonicalHeaderKey("RateLimit")
	headerXLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	headerXRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	headerXReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
	headerRetryAfter = http.CanonicalHeaderKey("Retry-After")
)

// RetryAfterSeconds is the Retry-After value for a wait of d: rounded up, and
// at least 1, because "retry after 0 seconds" on a deny invites a busy loop.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, CeilSeconds(d))
}

// CeilMilliseconds rounds d up to whole milliseconds, so a client waiting
// that long is never early.
func CeilMilliseconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// CeilSeconds rounds d up to whole seconds.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

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
	return l.Window
}

// appendSFString appends the policy item name "policy.limit" (or whichever
// part is not empty) as a structured-field string: printable ASCII only, with
// backslash escapes for '"' and '\'; other bytes are replaced by '?'.
func appendSFString(buf []byte, policy, limit string) []byte {
	buf = append(buf, '"')
	buf = appendSFChars(buf, policy)
	if policy != "" && limit != "" {
		buf = append(buf, '.')
	}
	buf = appendSFChars(buf, limit)
	return append(buf, '"')
}

func appendSFChars(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20 || c > 0x7e:
			buf = append(buf, '?')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}
