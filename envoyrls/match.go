package envoyrls

import (
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Match is the rule a request descriptor matched, and the counter it uses.
type Match struct {
	Rule *Rule
	// Subject holds the request's values for the key-only and wildcard
	// entries of the path (length-prefixed, so unambiguous): each distinct
	// value gets its own counter, as in envoyproxy/ratelimit.
	Subject string
}

// Match finds the rule of a request descriptor, following envoyproxy/ratelimit:
// the entries are walked from the root, and at each level an exact key and
// value wins over a wildcard value ("foo*"), which wins over the key alone.
// The rule applies only if the walk consumes every entry and ends on a
// descriptor with a rate_limit; there is no backtracking. ok is false when no
// rule applies.
func (d *Domain) Match(entries []*ratelimitv3.RateLimitDescriptor_Entry) (m Match, ok bool) {
	if d == nil || len(entries) == 0 {
		return Match{}, false
	}
	// The subject is built on the stack and made a string once: a Builder
	// grew it two or three times per check.
	var room [96]byte
	subject := room[:0]
	cur := d.root
	for i, e := range entries {
		next := cur.child(e.GetKey(), e.GetValue())
		if next == nil {
			return Match{}, false
		}
		switch {
		case next.kind == matchKeyOnly, next.kind == matchWildcard && !next.shareThreshold:
			subject = strconv.AppendInt(subject, int64(len(e.GetValue())), 10)
			subject = append(subject, ':')
			subject = append(subject, e.GetValue()...)
		}
		if i == len(entries)-1 {
			if next.rule == nil {
				return Match{}, false
			}
			return Match{Rule: next.rule, Subject: string(subject)}, true
		}
		cur = next
	}
	return Match{}, false
}

func (n *node) child(key, value string) *node {
	if c := n.exact[entry{key, value}]; c != nil {
		return c
	}
	for _, w := range n.wildcard {
		if w.key == key && globMatch(w.glob, value) {
			return w
		}
	}
	return n.keyOnly[key]
}
