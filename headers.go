package sluice

import (
	"math"
	"net/http"
	"strconv"
	"strings"
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
	if len(d.Limits) == 0 {
		return
	}
	items := make([]string, 0, len(d.Limits))
	for _, ld := range d.Limits {
		items = append(items, sfString(policyItemName(policy, ld.Name))+
			";q="+strconv.FormatInt(ld.Limit, 10)+
			";w="+strconv.FormatInt(policyWindowSeconds(ld), 10))
	}
	h.Set("RateLimit-Policy", strings.Join(items, ", "))

	name := policy
	for _, ld := range d.Limits {
		if ld.Limit == d.Limit && ld.Remaining == d.Remaining && ld.ResetAfter == d.ResetAfter {
			name = policyItemName(policy, ld.Name)
			break
		}
	}
	h.Set("RateLimit", sfString(name)+";r="+strconv.FormatInt(d.Remaining, 10)+
		";t="+strconv.FormatInt(CeilSeconds(d.ResetAfter), 10))

	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(CeilSeconds(d.ResetAfter), 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(d.RetryAfter), 10))
	}
}

// RetryAfterSeconds is the Retry-After value for a wait of d: rounded up, and
// at least 1, because "retry after 0 seconds" on a deny invites a busy loop.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, CeilSeconds(d))
}

// CeilSeconds rounds d up to whole seconds.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// policyWindowSeconds is the draft's "w": the time window of the quota. For a
// token bucket, the time a full bucket takes to refill from empty.
func policyWindowSeconds(ld LimitDecision) int64 {
	return max(1, CeilSeconds(ld.Window))
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
	return l.Window
}

func policyItemName(policy, limit string) string {
	if policy == "" {
		return limit
	}
	return policy + "." + limit
}

// sfString quotes s as a structured-field string: printable ASCII only, with
// backslash escapes for '"' and '\'; other bytes are replaced by '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
