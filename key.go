package sluice

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
)

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
	tag := SubjectTag(r.Tenant, r.Rule, r.Subject)
	keys := make([]string, len(r.Limits))
	for i, l := range r.Limits {
		keys[i] = LimitKey(prefix, tag, l)
	}
	return keys
}

// SubjectTag is the hash tag shared by every key of (tenant, rule, subject).
func SubjectTag(tenant, rule, subject string) string {
	h := sha256.New()
	var n [8]byte
	for _, part := range []string{tenant, rule, subject} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	// 128 bits is plenty against accidental collisions and keeps keys short.
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

// LimitKey is the key of one limit under a subject tag.
func LimitKey(prefix, tag string, l Limit) string {
	// Names are restricted to [A-Za-z0-9_.-] by Validate, so ':' separates
	// unambiguously.
	k := prefix + "{" + tag + "}:" + l.Name + ":"
	switch l.Algorithm {
	case AlgorithmTokenBucket:
		k += "tb"
	case AlgorithmSlidingWindow:
		k += "sw" + strconv.FormatInt(l.Window.Milliseconds(), 10)
	case AlgorithmFixedWindow:
		k += "fw" + strconv.FormatInt(l.Window.Milliseconds(), 10)
	}
	return k
}
