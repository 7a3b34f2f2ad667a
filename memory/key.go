package memory

import "github.com/sluicelabs/sluice"

// keyList holds a subject tag and the keys of a check's limits in one buffer,
// which a caller's stack array can back.
type keyList struct {
	buf []byte
	// bounds[0] ends the tag; key i is buf[bounds[i]:bounds[i+1]].
	bounds [sluice.MaxLimits + 1]int
}

// buildKeys lays out the tag of (tenant, rule, subject) and the key of each
// limit, sluice.LimitKey("", tag, l), in buf, without allocating (for parts
// up to a few hundred bytes): checks build keys on every call. limits has
// been validated, so there are at most sluice.MaxLimits.
func buildKeys(buf []byte, tenant, rule, subject string, limits []sluice.Limit) keyList {
	var k keyList
	k.buf = sluice.AppendSubjectTag(buf, tenant, rule, subject)
	k.bounds[0] = len(k.buf)
	for i, l := range limits {
		k.buf = sluice.AppendLimitKey(k.buf, "", k.buf[:k.bounds[0]], l)
		k.bounds[i+1] = len(k.buf)
	}
	return k
}

func (k *keyList) tag() []byte { return k.buf[:k.bounds[0]] }

func (k *keyList) key(i int) []byte { return k.buf[k.bounds[i]:k.bounds[i+1]] }
