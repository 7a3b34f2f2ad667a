package envoyrls

import "fmt"

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
