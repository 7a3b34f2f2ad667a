package redis

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/sluicelabs/sluice"
)

// tagLen is the length of sluice.SubjectTag: 16 bytes in unpadded base64.
const tagLen = 22

// appendSubjectTag appends sluice.SubjectTag(tenant, rule, subject) to dst
// without allocating (for parts up to a few hundred bytes). The same as in
// package memory; key_test.go holds both to sluice.SubjectTag.
func appendSubjectTag(dst []byte, tenant, rule, subject string) []byte {
	var sum [sha256.Size]byte
	if n := 24 + len(tenant) + len(rule) + len(subject); n <= 512 {
		var buf [512]byte
		b := buf[:0]
		for _, part := range [3]string{tenant, rule, subject} {
			b = binary.BigEndian.AppendUint64(b, uint64(len(part)))
			b = append(b, part...)
		}
		sum = sha256.Sum256(b)
	} else {
		h := sha256.New()
		var n [8]byte
		for _, part := range [3]string{tenant, rule, subject} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write([]byte(part))
		}
		h.Sum(sum[:0])
	}
	return base64.RawURLEncoding.AppendEncode(dst, sum[:16])
}

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
	var tagBuf [tagLen]byte
	tag := appendSubjectTag(tagBuf[:0], req.Tenant, req.Rule, req.Subject)

	size := 40 // now and cost
	for _, l := range req.Limits {
		size += len(prefix) + len(tag) + len(l.Name) + 3*20 + 32
	}
	var b strings.Builder
	b.Grow(size)
	var num [20]byte
	appendInt := func(v int64) {
		b.Write(strconv.AppendInt(num[:0], v, 10))
	}
	// ends[i] is where the i-th string ends in b: the n keys, then now, cost,
	// and per limit capacity, p1 and (token bucket) p2.
	var stackEnds [2 + 4*sluice.MaxLimits]int
	ends := stackEnds[:0]
	for _, l := range req.Limits {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.Write(tag)
		b.WriteString("}:")
		b.WriteString(l.Name)
		b.WriteByte(':')
		switch l.Algorithm {
		case sluice.AlgorithmTokenBucket:
			b.WriteString("tb")
		case sluice.AlgorithmSlidingWindow:
			b.WriteString("sw")
			appendInt(l.Window.Milliseconds())
		case sluice.AlgorithmFixedWindow:
			b.WriteString("fw")
			appendInt(l.Window.Milliseconds())
		}
		ends = append(ends, b.Len())
	}
	if !req.Now.IsZero() {
		appendInt(req.Now.UnixMilli())
	}
	ends = append(ends, b.Len())
	appendInt(req.Cost)
	ends = append(ends, b.Len())
	for _, l := range req.Limits {
		appendInt(l.Capacity)
		ends = append(ends, b.Len())
		if l.Algorithm == sluice.AlgorithmTokenBucket {
			tokens, interval := l.RefillRate()
			appendInt(tokens)
			ends = append(ends, b.Len())
			appendInt(interval)
		} else {
			appendInt(l.Window.Milliseconds())
		}
		ends = append(ends, b.Len())
	}
	s := b.String()
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
		switch l.Algorithm {
		case sluice.AlgorithmTokenBucket:
			a[0], a[3] = "t", str()
		case sluice.AlgorithmSlidingWindow:
			a[0], a[3] = "s", "0"
		default:
			a[0], a[3] = "f", "0"
		}
	}
	return c
}
