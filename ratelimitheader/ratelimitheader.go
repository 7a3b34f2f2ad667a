// Package ratelimitheader writes a decision as HTTP rate-limit header
// fields: the IETF RateLimit-Policy and RateLimit fields in the
// structured-field syntax of draft-ietf-httpapi-ratelimit-headers (10), the
// widespread X-RateLimit-Limit, -Remaining and -Reset (seconds), and
// Retry-After on a deny. Every writer of these headers (the service, the
// middleware, the gateway, the Envoy service's response headers) goes through
// here, so they always agree.
//
// Seconds are rounded up, so a client that waits them is never early, and
// Retry-After is at least 1 on a deny (absent on a deny no wait ends: a
// credits balance without a refill).
package ratelimitheader

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicelabs/sluice"
)

// Set writes the rate-limit headers of d on h, under policy name policy
// (usually the rule's name). The RateLimit field names the limit that binds,
// the one d.Combine chose.
func Set(h http.Header, policy string, d sluice.Decision) {
	SetWithPolicy(h, policy, "", d)
}

// Policy returns the RateLimit-Policy value of a check of limits under policy
// name policy: the same for every answer of a rule, so callers that answer
// many checks of one rule compute it once (SetWithPolicy).
func Policy(policy string, limits []sluice.Limit) string {
	buf := make([]byte, 0, 64*len(limits))
	for i, l := range limits {
		buf = appendPolicyItem(buf, i, policy, l.Name, l.DecisionLimit(), sluice.PolicyWindow(l), l.Algorithm == sluice.AlgorithmConcurrency)
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
	return strconv.AppendInt(buf, max(1, ceilSeconds(window)), 10)
}

// SetWithPolicy is Set with the RateLimit-Policy value given (from Policy
// over the limits d was decided under); "" computes it from d.
func SetWithPolicy(h http.Header, policy, policyValue string, d sluice.Decision) {
	if len(d.Limits) == 0 {
		return
	}
	// One buffer for every value, one slice for every header, and canonical
	// keys assigned directly: this runs on every request.
	buf := make([]byte, 0, 64*len(d.Limits)+96)
	if policyValue == "" {
		for i, ld := range d.Limits {
			buf = appendPolicyItem(buf, i, policy, ld.Name, ld.Limit, ld.Window, ld.Algorithm == sluice.AlgorithmConcurrency)
		}
	}
	policyEnd := len(buf)

	name := ""
	if d.Binding >= 0 && d.Binding < len(d.Limits) {
		name = d.Limits[d.Binding].Name
	}
	reset := ceilSeconds(d.ResetAfter)
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
	// A deny that no wait ends (a credits balance without a refill: only a
	// top-up helps) says no Retry-After, so clients do not retry for ever.
	if !d.Allowed && d.RetryAfter > 0 {
		h[headerRetryAfter] = values[5:6:6]
	}
}

// The headers Set writes, in canonical form.
var (
	headerPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	headerRateLimit  = http.CanonicalHeaderKey("RateLimit")
	headerXLimit     = http.CanonicalHeaderKey("X-RateLimit-Limit")
	headerXRemaining = http.CanonicalHeaderKey("X-RateLimit-Remaining")
	headerXReset     = http.CanonicalHeaderKey("X-RateLimit-Reset")
	headerRetryAfter = http.CanonicalHeaderKey("Retry-After")
)

// Names returns the names of every header Set may write, in canonical form:
// for a CORS policy to expose them, or a client to copy them from an answer.
func Names() []string {
	return []string{headerRateLimit, headerPolicy, headerXLimit, headerXRemaining, headerXReset, headerRetryAfter}
}

// Copy returns the rate-limit headers of h (those of Names), as a remote
// service's answer carried them.
func Copy(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range Names() {
		if v := h.Values(name); len(v) > 0 {
			out[name] = slices.Clone(v)
		}
	}
	return out
}

// RetryAfterSeconds is the Retry-After value for a wait of d: rounded up, and
// at least 1, because "retry after 0 seconds" on a deny invites a busy loop.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, ceilSeconds(d))
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

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
