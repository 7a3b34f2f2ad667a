package redis

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicelabs/sluice"
)

// scriptCall is the keys and arguments of one check.lua call.
type scriptCall struct {
	keys, args []string
}

// buildCall lays out the keys (sluice.Keys(prefix, req), byte for byte) and
// the arguments of check.lua for req, which has been validated: every key
// and number is a substring of one string, and keys and args share one
// array, so a check costs two allocations whatever its number of limits.
// Nothing is reused across calls: rueidis may still be writing a command
// whose context has expired.
func buildCall(prefix string, req sluice.Request) scriptCall {
	n := len(req.Limits)
	var tagBuf [sluice.SubjectTagLen]byte
	tag := sluice.AppendSubjectTag(tagBuf[:0], req.Tenant, req.Rule, req.Subject)

	size := 40 // now and cost
	tabled := false
	for _, l := range req.Limits {
		size += len(prefix) + len(tag) + len(l.Name) + 3*20 + 32 + len(l.TimeZone)
		if l.Calendar != "" || l.Algorithm == sluice.AlgorithmCredits {
			size += 5 * 21 // a period table
			tabled = true
		}
	}
	// Calendar periods are computed here, where the zone database is, around
	// this process's time; the script picks the one holding Redis's time.
	var tableMs int64
	if tabled {
		tableMs = req.Now.UnixMilli()
		if req.Now.IsZero() {
			tableMs = time.Now().UnixMilli()
		}
	}
	b := make([]byte, 0, size)
	// ends[i] is where the i-th string ends in b: the n keys, then now, cost,
	// and per limit capacity, p1 and (token bucket) p2.
	var stackEnds [2 + 4*sluice.MaxLimits]int
	ends := stackEnds[:0]
	for _, l := range req.Limits {
		b = sluice.AppendLimitKey(b, prefix, tag, l)
		ends = append(ends, len(b))
	}
	if !req.Now.IsZero() {
		b = strconv.AppendInt(b, req.Now.UnixMilli(), 10)
	}
	ends = append(ends, len(b))
	b = strconv.AppendInt(b, req.Cost, 10)
	ends = append(ends, len(b))
	for _, l := range req.Limits {
		if l.Algorithm == sluice.AlgorithmCredits {
			b = strconv.AppendInt(b, l.Refill.Amount, 10)
		} else {
			b = strconv.AppendInt(b, l.Capacity, 10)
		}
		ends = append(ends, len(b))
		if l.Algorithm == sluice.AlgorithmCredits || l.Calendar != "" {
			b = l.AppendPeriodTable(b, tableMs)
			ends = append(ends, len(b))
			b = strconv.AppendInt(b, l.Refill.Max, 10)
		} else if l.Algorithm == sluice.AlgorithmTokenBucket {
			tokens, interval := l.RefillRate()
			b = strconv.AppendInt(b, tokens, 10)
			ends = append(ends, len(b))
			b = strconv.AppendInt(b, interval, 10)
		} else {
			b = strconv.AppendInt(b, l.Window.Milliseconds(), 10)
		}
		ends = append(ends, len(b))
	}
	// b is never written again, so it can back a string without a copy, as
	// strings.Builder does.
	s := unsafe.String(unsafe.SliceData(b), len(b))
	next := 0
	str := func() string {
		v := s[next:ends[0]]
		next, ends = ends[0], ends[1:]
		return v
	}

	all := make([]string, n+2+4*n)
	c := scriptCall{keys: all[:n:n], args: all[n:]}
	for i := range c.keys {
		c.keys[i] = str()
	}
	c.args[0], c.args[1] = str(), str()
	for i, l := range req.Limits {
		a := c.args[2+4*i : 2+4*i+4]
		a[1], a[2] = str(), str()
		switch {
		case l.Algorithm == sluice.AlgorithmCredits || l.Calendar != "":
			a[0], a[3] = scriptAlgorithm(l), str()
		case l.Algorithm == sluice.AlgorithmTokenBucket:
			a[0], a[3] = "t", str()
		case l.Algorithm == sluice.AlgorithmSlidingWindow:
			a[0], a[3] = "s", "0"
		case l.Algorithm == sluice.AlgorithmConcurrency:
			a[0], a[3] = "c", "0"
		default:
			a[0], a[3] = "f", "0"
		}
	}
	return c
}

// scriptAlgorithm is check.lua's letter for a calendar window or a credits
// limit: "F", or "k" (set refill or none) and "K" (add refill).
func scriptAlgorithm(l sluice.Limit) string {
	switch {
	case l.Calendar != "":
		return "F"
	case l.Refill.Mode == sluice.RefillAdd:
		return "K"
	}
	return "k"
}
