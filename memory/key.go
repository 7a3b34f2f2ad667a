package memory

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"

	"github.com/sluicelabs/sluice"
)

// appendSubjectTag appends sluice.SubjectTag(tenant, rule, subject) to dst
// without allocating (for parts up to a few hundred bytes): checks build keys
// on every call. key_test.go holds it to sluice.SubjectTag.
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

// appendLimitKey appends sluice.LimitKey("", tag, l) to dst. tag may alias
// dst's array.
func appendLimitKey(dst, tag []byte, l sluice.Limit) []byte {
	dst = append(dst, '{')
	dst = append(dst, tag...)
	dst = append(dst, "}:"...)
	dst = append(dst, l.Name...)
	dst = append(dst, ':')
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket:
		dst = append(dst, "tb"...)
	case sluice.AlgorithmSlidingWindow:
		dst = append(dst, "sw"...)
		dst = strconv.AppendInt(dst, l.Window.Milliseconds(), 10)
	case sluice.AlgorithmFixedWindow:
		dst = append(dst, "fw"...)
		dst = strconv.AppendInt(dst, l.Window.Milliseconds(), 10)
	}
	return dst
}

// keyList holds a subject tag and the keys of a check's limits in one buffer,
// which a caller's stack array can back.
type keyList struct {
	buf []byte
	// bounds[0] ends the tag; key i is buf[bounds[i]:bounds[i+1]].
	bounds [sluice.MaxLimits + 1]int
}

// buildKeys lays out the tag of (tenant, rule, subject) and the key of each
// limit, sluice.LimitKey("", tag, l), in buf. limits has been validated, so
// there are at most sluice.MaxLimits.
func buildKeys(buf []byte, tenant, rule, subject string, limits []sluice.Limit) keyList {
	var k keyList
	k.buf = appendSubjectTag(buf, tenant, rule, subject)
	k.bounds[0] = len(k.buf)
	for i, l := range limits {
		k.buf = appendLimitKey(k.buf, k.buf[:k.bounds[0]], l)
		k.bounds[i+1] = len(k.buf)
	}
	return k
}

func (k *keyList) tag() []byte { return k.buf[:k.bounds[0]] }

func (k *keyList) key(i int) []byte { return k.buf[k.bounds[i]:k.bounds[i+1]] }
