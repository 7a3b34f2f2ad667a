package sluice

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"sync"
)

// SubjectTagLen is the length of a subject tag: 16 bytes of SHA-256 in
// unpadded URL-safe base64. A [SubjectTagLen]byte array holds
// AppendSubjectTag's output without growing.
const SubjectTagLen = 22

// Keys returns the store keys holding the counters of each of r's limits, in
// order, under prefix.
//
// A key is prefix + "{" + tag + "}" + ":" + limit part. The tag hashes
// (tenant, rule, subject) with every part length-prefixed, so no subject can
// collide with another tenant's or rule's key, pick a Redis Cluster slot, or
// make keys long. All keys of one check share the tag, so a multi-key script
// runs on one Cluster node. The limit part names the limit and what its counter
// means (algorithm and window), so changing a limit's algorithm or window starts
// fresh counters instead of misreading old ones, while raising a capacity keeps
// them.
func Keys(prefix string, r Request) []string {
	var tagBuf [SubjectTagLen]byte
	tag := AppendSubjectTag(tagBuf[:0], r.Tenant, r.Rule, r.Subject)
	keys := make([]string, len(r.Limits))
	var buf []byte
	for i, l := range r.Limits {
		buf = AppendLimitKey(buf[:0], prefix, tag, l)
		keys[i] = string(buf)
	}
	return keys
}

// SubjectTag is the hash tag shared by every key of (tenant, rule, subject).
func SubjectTag(tenant, rule, subject string) string {
	var buf [SubjectTagLen]byte
	return string(AppendSubjectTag(buf[:0], tenant, rule, subject))
}

// AppendSubjectTag appends SubjectTag(tenant, rule, subject) to dst and
// returns the extended slice. It allocates nothing beyond growing dst (for
// parts of up to a few hundred bytes in all), so stores can build keys on
// every check.
func AppendSubjectTag(dst []byte, tenant, rule, subject string) []byte {
	var sum [sha256.Size]byte
	if n := 24 + len(tenant) + len(rule) + len(subject); n <= tagBufSize {
		// A pooled buffer, not one on the stack: 512 bytes more on the
		// stack of every check made request goroutines grow (and copy)
		// their stacks, about a tenth of the CPU of a gRPC check.
		buf := tagBufs.Get().(*[tagBufSize]byte)
		b := buf[:0]
		for _, part := range [3]string{tenant, rule, subject} {
			b = binary.BigEndian.AppendUint64(b, uint64(len(part)))
			b = append(b, part...)
		}
		sum = sha256.Sum256(b)
		tagBufs.Put(buf)
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
	// 128 bits is plenty against accidental collisions and keeps keys short.
	return base64.RawURLEncoding.AppendEncode(dst, sum[:16])
}

const tagBufSize = 512

var tagBufs = sync.Pool{New: func() any { return new([tagBufSize]byte) }}

// LimitKey is the key of one limit under a subject tag.
func LimitKey(prefix, tag string, l Limit) string {
	var buf [128]byte
	return string(AppendLimitKey(buf[:0], prefix, []byte(tag), l))
}

// AppendLimitKey appends LimitKey(prefix, string(tag), l) to dst and returns
// the extended slice, allocating nothing beyond growing dst. tag may lie in
// dst[:len(dst)], as when the tag was appended to dst just before: appending
// never writes there.
func AppendLimitKey(dst []byte, prefix string, tag []byte, l Limit) []byte {
	// Names are restricted to [A-Za-z0-9_.-] by Validate, so ':' separates
	// unambiguously.
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = append(dst, tag...)
	dst = append(dst, "}:"...)
	dst = append(dst, l.Name...)
	dst = append(dst, ':')
	switch l.Algorithm {
	case AlgorithmTokenBucket:
		dst = append(dst, "tb"...)
	case AlgorithmSlidingWindow:
		dst = append(dst, "sw"...)
		dst = strconv.AppendInt(dst, l.Window.Milliseconds(), 10)
	case AlgorithmFixedWindow:
		if l.Calendar != "" {
			// A calendar window: its period and zone are its window, so
			// changing either starts fresh counters.
			dst = append(dst, "fc"...)
			dst = append(dst, l.Calendar...)
			dst = append(dst, ':')
			dst = append(dst, l.TimeZone...)
			break
		}
		dst = append(dst, "fw"...)
		dst = strconv.AppendInt(dst, l.Window.Milliseconds(), 10)
	case AlgorithmCredits:
		// The refill is left out: changing the schedule keeps the balance.
		dst = append(dst, "cr"...)
	case AlgorithmConcurrency:
		// The TTL is left out: changing it keeps the leases held.
		dst = append(dst, "cc"...)
	}
	return dst
}
