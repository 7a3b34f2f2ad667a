package check

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
)

// denyCache remembers recent denies so that a client hammering a limit it
// has already hit is answered in-process, without a store round trip.
//
// It is exact: after a deny of cost k at time t with retry_after r, no check
// of cost >= k for the same (namespace, rule, subject) can be allowed before
// t + r, because only time adds quota (a deny consumes nothing, other traffic
// only takes more). t is when the denied call was sent, so the local deadline
// never outlasts the store's. Two things add quota without time passing, and
// both clear entries: a changed rule (entries remember the rule they were
// made under, and a snapshot rebuild gives a changed rule a new identity) and
// a subject reset (forget).
//
// Its answers are exact too: the figures are this request's, as the store
// would give them at now, derived from what the cached deny said (see
// answer). A figure that cannot be derived exactly for some cost (a sliding
// window's counts are not all in a decision) makes the cache fall through
// to the store for that check. A check this process admits for the subject
// drops the entry (the store's state moved without time passing; see
// admits), and so does a check whose cost the entry does not cover, since
// it may be admitted. Checks other processes admit are not seen: the
// decision stays exact (they only take quota), the figures are then this
// process's latest view.
//
// The cache is bounded; dropping an entry only costs a future hit.
type denyCache struct {
	seed     maphash.Seed
	shards   [denyShards]denyShard
	perShard int
	// admits counts admitted checks per counter, striped by a hash of the
	// counter: a deny's figures hold only while none of its counters has
	// admitted anything since the deny was sent, which the sum of its
	// stripes tells (they only grow). It catches what forgetting the
	// checked subject cannot: a deny in flight while a check was admitted,
	// and checks of one counter under several cache subjects (Envoy's
	// all-or-nothing requests). Stripes shared by other counters only
	// cost hits.
	admits [admitStripes]atomic.Uint64
}

const (
	denyShards   = 32
	admitStripes = 4096
)

type denyShard struct {
	mu      sync.Mutex
	entries map[denyKey]denyEntry
}

type denyKey struct {
	namespace, rule, subject string
}

type denyEntry struct {
	// rule is the rule the deny was decided under; an entry made under
	// another version of the rule is stale.
	rule     *Rule
	limits   []sluice.Limit // the limits the deny was decided on
	subject  string         // the store's subject of those limits
	mark     uint64         // admits of their counters when the deny was sent
	cost     int64
	sentAt   time.Time
	until    time.Time
	decision sluice.Decision
}

// newDenyCache returns a cache holding at most size entries (0: no cache).
func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed()}
	c.perShard = size / denyShards
	if size > 0 && c.perShard == 0 {
		c.perShard = 1
	}
	for i := range c.shards {
		c.shards[i].entries = make(map[denyKey]denyEntry)
	}
	return c
}

// hashSubject starts h on the cache's seed with a subject of a rule.
func (c *denyCache) hashSubject(h *maphash.Hash, namespace, rule, subject string) {
	h.SetSeed(c.seed)
	h.WriteString(namespace)
	h.WriteByte(0)
	h.WriteString(rule)
	h.WriteByte(0)
	h.WriteString(subject)
}

func (c *denyCache) shard(k denyKey) *denyShard {
	var h maphash.Hash
	c.hashSubject(&h, k.namespace, k.rule, k.subject)
	return &c.shards[h.Sum64()%denyShards]
}

// lookup returns the remembered deny for a check of cost under rule, adjusted
// to now, if one still applies.
func (c *denyCache) lookup(rule *Rule, subject string, cost int64, now time.Time) (sluice.Decision, bool) {
	return c.lookupFor(rule, subject, cost, now, nil)
}

// lookupFor is lookup for a check whose limits were chosen per subject (a
// plan or an override): want, when set, is that limit set, and an entry
// remembered under another set (another plan, an override since expired)
// is stale.
func (c *denyCache) lookupFor(rule *Rule, subject string, cost int64, now time.Time, want []sluice.Limit) (sluice.Decision, bool) {
	if c.perShard == 0 || cost <= 0 {
		return sluice.Decision{}, false
	}
	k := denyKey{rule.Namespace, rule.Name, subject}
	sh := c.shard(k)
	sh.mu.Lock()
	e, ok := sh.entries[k]
	if ok && (e.rule != rule || want != nil && !sameLimitSet(e.limits, want) || !now.Before(e.until) || cost < e.cost || c.mark(rule, e.subject, e.limits) != e.mark) {
		// Stale, or a cost the deny does not cover: that check goes to
		// the store and may be admitted, after which the entry's figures
		// would be wrong.
		delete(sh.entries, k)
		ok = false
	}
	sh.mu.Unlock()
	if !ok {
		return sluice.Decision{}, false
	}
	return e.answer(cost, now)
}

// mark sums the admits of the counters of limits for the store's subject
// of rule.
func (c *denyCache) mark(rule *Rule, subject string, limits []sluice.Limit) uint64 {
	if c.perShard == 0 {
		return 0
	}
	sum := uint64(0)
	for i := range limits {
		sum += c.stripe(rule, subject, limits[i].Name).Load()
	}
	return sum
}

// admitted counts an admitted check of limits for subject under rule.
func (c *denyCache) admitted(rule *Rule, subject string, limits []sluice.Limit) {
	if c.perShard == 0 {
		return
	}
	for i := range limits {
		c.stripe(rule, subject, limits[i].Name).Add(1)
	}
}

func (c *denyCache) stripe(rule *Rule, subject, limit string) *atomic.Uint64 {
	var h maphash.Hash
	c.hashSubject(&h, rule.Namespace, rule.Name, subject)
	h.WriteByte(0)
	h.WriteString(limit)
	return &c.admits[h.Sum64()%admitStripes]
}

// remember records a deny of cost under rule, keyed by cacheSubject, of
// limits for the store's subject, for a check sent at sentAt when the
// admits of its counters were mark, for at most maxAge when it is not 0.
// A deny sent before some check of its counters was admitted is not kept:
// its figures are already old.
func (c *denyCache) remember(rule *Rule, cacheSubject, subject string, limits []sluice.Limit, cost int64, sentAt time.Time, mark uint64, d sluice.Decision, maxAge time.Duration) {
	if c.perShard == 0 || d.Allowed || d.Degraded || cost <= 0 || d.RetryAfter <= 0 || len(d.Limits) != len(limits) ||
		c.mark(rule, subject, limits) != mark {
		return
	}
	k := denyKey{rule.Namespace, rule.Name, cacheSubject}
	life := d.RetryAfter
	if maxAge > 0 {
		life = min(life, maxAge)
	}
	e := denyEntry{rule: rule, limits: limits, subject: subject, mark: mark, cost: cost, sentAt: sentAt, until: sentAt.Add(life), decision: d}
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, ok := sh.entries[k]; ok && old.rule == rule && old.cost < cost && sentAt.Before(old.until) {
		// The older entry covers more checks (all of cost >= old.cost) for
		// a while; keep it rather than narrow the cache.
		return
	}
	if _, ok := sh.entries[k]; !ok && len(sh.entries) >= c.perShard {
		c.evict(sh, sentAt)
	}
	sh.entries[k] = e
}

// evict makes room in a full shard: expired entries first, else any one.
func (c *denyCache) evict(sh *denyShard, now time.Time) {
	for k, e := range sh.entries {
		if !now.Before(e.until) {
			delete(sh.entries, k)
		}
	}
	for k := range sh.entries {
		if len(sh.entries) < c.perShard {
			return
		}
		delete(sh.entries, k)
	}
}

// forget drops the entry of one subject of a rule (after a counter reset).
func (c *denyCache) forget(namespace, rule, subject string) {
	k := denyKey{namespace, rule, subject}
	sh := c.shard(k)
	sh.mu.Lock()
	delete(sh.entries, k)
	sh.mu.Unlock()
}

// forgetRule drops every entry of a rule (or of every rule of a namespace
// when rule is empty), whatever the subject.
func (c *denyCache) forgetRule(namespace, rule string) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k := range sh.entries {
			if k.namespace == namespace && (rule == "" || k.rule == rule) {
				delete(sh.entries, k)
			}
		}
		sh.mu.Unlock()
	}
}

// len returns the number of entries held.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// answer is the store's decision for a check of cost (>= e.cost) at now
// (before e.until), derived from the cached deny, or false when some figure
// cannot be derived exactly. Between the deny and now only time has passed
// for the subject's counters as far as this process knows (an admitted
// check or a settle drops the entry), so each limit's figures follow from
// its state at the deny, and the state from the deny's figures: exactly
// for a token bucket when the figures pin its level (always when it
// refills a whole unit per millisecond or slower: see RefillRate), for a
// fixed window always, for a sliding window and a concurrency limit when
// the figures asked for do not depend on what the deny leaves unknown.
//
// The deny's figures are taken as of when it was sent (the store decided a
// moment later), so the waits derived never end early.
func (e denyEntry) answer(cost int64, now time.Time) (sluice.Decision, bool) {
	elapsed := max(0, now.Sub(e.sentAt))
	ms := int64(elapsed / time.Millisecond)
	frac := elapsed - time.Duration(ms)*time.Millisecond
	d := sluice.Decision{Limits: make([]sluice.LimitDecision, len(e.limits))}
	for i, l := range e.limits {
		ld, ok := limitAt(l, e.decision.Limits[i], e.cost, cost, ms)
		if !ok {
			return sluice.Decision{}, false
		}
		// Stores count whole milliseconds; the waits also shrink by the
		// part of one that has passed.
		ld.ResetAfter = max(0, ld.ResetAfter-frac)
		if ld.RetryAfter > 0 {
			ld.RetryAfter = max(time.Nanosecond, ld.RetryAfter-frac)
		}
		d.Limits[i] = ld
	}
	d.Combine()
	if d.Allowed {
		return sluice.Decision{}, false // cannot happen: cost >= e.cost
	}
	return d, true
}

// limitAt derives one limit's figures for a check of cost k2 made e ms
// after a decision of cost k reported was (all of them before the request,
// since a deny consumes nothing).
func limitAt(l sluice.Limit, was sluice.LimitDecision, k, k2, e int64) (sluice.LimitDecision, bool) {
	out := was
	out.Allowed, out.RetryAfter = true, 0
	reset := was.ResetAfter.Milliseconds()
	// Every algorithm's reset time counts down with no traffic: a bucket
	// fills at its rate, a window's usage ends when it does (a sliding
	// window's current count, becoming the previous one, still ends at
	// the same time).
	out.ResetAfter = msDuration(max(0, reset-e))
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket:
		return tokenBucketAt(l, was, k, k2, e)
	case sluice.AlgorithmFixedWindow:
		if reset == 0 || e >= reset {
			// Empty, or its window has ended: the next one is.
			out.Remaining = l.Capacity
			return out, true
		}
		// The same window: its count is still capacity - remaining (or
		// the capacity or more when nothing remains).
		if was.Remaining < k2 {
			out.Allowed, out.RetryAfter = false, msDuration(reset-e)
		}
		return out, true
	case sluice.AlgorithmSlidingWindow:
		if reset == 0 || e >= reset {
			out.Remaining = l.Capacity
			return out, true
		}
		// Usage only falls with time, so a limit that denied k still
		// denies it, its wait shortened by e, and its remaining stays
		// below k: pinned when the deny's was k - 1. One that allowed
		// k still does, and its remaining is pinned when full. Other
		// figures need the counts, which a decision does not carry.
		switch {
		case !was.Allowed && k2 == k && was.Remaining == k-1:
			out.Allowed, out.RetryAfter = false, was.RetryAfter-msDuration(e)
			return out, out.RetryAfter > 0
		case was.Allowed && k2 <= k && was.Remaining == l.Capacity:
			return out, true
		}
		return out, false
	case sluice.AlgorithmConcurrency:
		// Exact only with nothing held: leases held may expire
		// meanwhile, which a decision does not say when.
		return out, was.Remaining == l.Capacity && k2 <= l.Capacity
	}
	return out, false
}

// tokenBucketAt: the bucket's level at the decision, in the stores' units
// (1/interval token; see sluice.Limit.RefillRate), lies in the range every
// figure of the decision allows; the figures at e for k2 are the same
// across that range (each is monotonic in the level, so the ends decide),
// or they cannot be derived.
func tokenBucketAt(l sluice.Limit, was sluice.LimitDecision, k, k2, e int64) (sluice.LimitDecision, bool) {
	n, p := l.RefillRate()
	if n <= 0 {
		return was, false
	}
	full := l.Capacity * p
	reset := was.ResetAfter.Milliseconds()
	lo, hi := int64(math.MinInt64), full
	narrow := func(a, b int64) { lo, hi = max(lo, a), min(hi, b) }
	if reset == 0 {
		narrow(full, full)
	} else {
		narrow(full-reset*n, full-reset*n+n-1)
	}
	if was.Remaining > 0 {
		narrow(was.Remaining*p, was.Remaining*p+p-1)
	} else {
		narrow(lo, p-1)
	}
	if was.Allowed {
		narrow(k*p, hi)
	} else {
		retry := was.RetryAfter.Milliseconds()
		narrow(k*p-retry*n, k*p-retry*n+n-1)
	}
	if lo > hi {
		return was, false // figures no single level gives (a clock step)
	}
	at := func(level int64) sluice.LimitDecision {
		out := was
		if e >= ceilDiv(full-level, n) {
			level = full
		} else {
			level += e * n
		}
		out.Allowed, out.RetryAfter = level >= k2*p, 0
		if !out.Allowed {
			out.RetryAfter = msDuration(ceilDiv(k2*p-level, n))
		}
		out.Remaining = max(0, level/p)
		out.ResetAfter = msDuration(ceilDiv(full-level, n))
		return out
	}
	first, last := at(lo), at(hi)
	return first, first == last
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// sameLimitSet reports whether a and b are the same slice: resolved limit
// sets come from the rule, its plans or its overrides, never copied.
func sameLimitSet(a, b []sluice.Limit) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
