package envoyrls

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/check"
)

// Counting says how a domain's hits count. Sluice's own rule is that a
// denied request consumes nothing; envoyproxy/ratelimit adds every hit to
// the window's count, including one that takes it past the limit. Envoy
// relies on that for budgets charged after the fact: a route checks the
// budget with hits_addend 0 on the request, and apply_on_stream_done sends
// the actual cost (tokens, bytes) when the stream ends, ignoring the answer.
// Only a count that records that charge, even past the limit, denies the
// next request.
type Counting string

const (
	// CountingStrict: a denied request consumes nothing (Sluice's rule,
	// and what all_or_nothing needs). The default outside ENV mode.
	CountingStrict Counting = "strict"
	// CountingEnvoy: every hit counts, as in envoyproxy/ratelimit; a
	// descriptor is over its limit once its window's count, this hit
	// included, passes the limit. Applies to what is counted under
	// envoyproxy/ratelimit's keys (fixed windows of one unit on Redis with
	// --envoy-key-format ratelimit); Sluice's extensions (other algorithms,
	// unit_multiplier) and the memory store count strictly.
	CountingEnvoy Counting = "envoy"
)

// Valid reports whether c is a known counting ("" is the server's default).
func (c Counting) Valid() bool { return c == "" || c == CountingStrict || c == CountingEnvoy }

func parseCounting(s string) (Counting, error) {
	c := Counting(s)
	if !c.Valid() {
		return "", fmt.Errorf("counting %q is not one of strict (a denied request consumes nothing) or envoy (every hit counts, as envoyproxy/ratelimit)", s)
	}
	return c, nil
}

// counting is how d's hits count on s.
func (s *Server) counting(d *Domain) Counting {
	if d != nil && d.Counting != "" {
		return d.Counting
	}
	if s.defaultCounting != "" {
		return s.defaultCounting
	}
	return CountingStrict
}

// holdBackIncrements is StopIncrementWhenOverLimit: it looks at each of
// pending's descriptors that count every hit and, if the request's hits
// would take any of them past its limit, turns the others into looks (cost
// 0), so only the descriptors over their limits count the request. Like
// envoyproxy/ratelimit, the look and the count are two store calls, not one
// atomic step: a request racing another near the limit may be counted as
// if the other had not come.
func (s *Server) holdBackIncrements(ctx context.Context, d *Domain, cd *compiledDomain, pending []*item, start time.Time) error {
	counted := 0
	for _, it := range pending {
		if it.countsAll && it.cost > 0 {
			counted++
		}
	}
	if counted < 2 {
		return nil // nothing to hold back from
	}
	over := make([]bool, len(pending))
	anyOver := false
	for i, it := range pending {
		if !it.countsAll || it.cost == 0 {
			continue
		}
		res, err := s.engine.Check(ctx, check.Query{Rule: it.check, Plan: it.plan, Subject: withoutExcess(it.subject), Cost: 0, Start: start})
		if err != nil {
			return s.checkFailed(ctx, d, []*item{it}, it.rule.FailureMode, err)
		}
		// The count is the limit less what remains (at least the limit
		// once nothing does); with the hits (the excess above the limit
		// included), is it past the limit?
		l := reportedLimit(res.Decision.Limits)
		count := l.Limit - l.Remaining
		over[i] = !res.Decision.Allowed || count+it.cost+excessOf(it.subject) > it.rule.Limit.Capacity
		anyOver = anyOver || over[i]
	}
	if !anyOver {
		return nil
	}
	for i, it := range pending {
		if it.countsAll && !over[i] {
			it.cost, it.subject = 0, withoutExcess(it.subject)
		}
	}
	return nil
}

// parseCountAll splits a count-every-hit subject (see countAllMarker) into
// the hits above the limit it carries and its descriptor part; ok is false
// for any other subject, or a malformed one.
func parseCountAll(subject string) (excess int64, descriptor string, ok bool) {
	rest, marked := strings.CutPrefix(subject, countAllMarker)
	if !marked {
		return 0, "", false
	}
	over, descriptor, found := strings.Cut(rest, "\x00")
	if !found {
		return 0, "", false
	}
	if over != "" {
		n, err := strconv.ParseInt(over, 10, 64)
		if err != nil || n < 0 {
			return 0, "", false
		}
		excess = n
	}
	return excess, descriptor, true
}

// withoutExcess is a count-every-hit subject without the hits above the
// limit it may carry.
func withoutExcess(subject string) string {
	if _, descriptor, ok := parseCountAll(subject); ok {
		return countAllMarker + "\x00" + descriptor
	}
	return subject
}

// excessOf is the hits above the limit a count-every-hit subject carries.
func excessOf(subject string) int64 {
	n, _, _ := parseCountAll(subject)
	return n
}
