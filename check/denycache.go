package check

import (
	"hash/maphash"
	"sync"
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
// The cache is bounded; dropping an entry only costs a future hit.
type denyCache struct {
	seed     maphash.Seed
	shards   [denyShards]denyShard
	perShard int
}

const denyShards = 32

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

func (c *denyCache) shard(k denyKey) *denyShard {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(k.namespace)
	h.WriteByte(0)
	h.WriteString(k.rule)
	h.WriteByte(0)
	h.WriteString(k.subject)
	return &c.shards[h.Sum64()%denyShards]
}

// lookup returns the remembered deny for a check of cost under rule, adjusted
// to now, if one still applies.
func (c *denyCache) lookup(rule *Rule, subject string, cost int64, now time.Time) (sluice.Decision, bool) {
	if c.perShard == 0 || cost <= 0 {
		return sluice.Decision{}, false
	}
	k := denyKey{rule.Namespace, rule.Name, subject}
	sh := c.shard(k)
	sh.mu.Lock()
	e, ok := sh.entries[k]
	if ok && (e.rule != rule || !now.Before(e.until)) {
		delete(sh.entries, k)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || cost < e.cost {
		return sluice.Decision{}, false
	}
	return aged(e.decision, now.Sub(e.sentAt)), true
}

// remember records a deny of cost under rule, for a check sent at sentAt.
func (c *denyCache) remember(rule *Rule, subject string, cost int64, sentAt time.Time, d sluice.Decision) {
	if c.perShard == 0 || d.Allowed || d.Degraded || cost <= 0 || d.RetryAfter <= 0 {
		return
	}
	k := denyKey{rule.Namespace, rule.Name, subject}
	e := denyEntry{rule: rule, cost: cost, sentAt: sentAt, until: sentAt.Add(d.RetryAfter), decision: d}
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

// aged returns d as it reads elapsed later: the waits shortened by elapsed.
// RetryAfter stays exact (an upper bound: only time adds quota). ResetAfter
// and Remaining are the deny's figures aged, not the store's: a sliding
// window's reset time jumps at a window boundary, and smaller checks allowed
// since may have taken some of what is left, so they are indications only.
func aged(d sluice.Decision, elapsed time.Duration) sluice.Decision {
	shorten := func(x time.Duration) time.Duration { return max(0, x-elapsed) }
	d.RetryAfter = shorten(d.RetryAfter)
	d.ResetAfter = shorten(d.ResetAfter)
	limits := make([]sluice.LimitDecision, len(d.Limits))
	for i, ld := range d.Limits {
		ld.RetryAfter = shorten(ld.RetryAfter)
		ld.ResetAfter = shorten(ld.ResetAfter)
		limits[i] = ld
	}
	d.Limits = limits
	return d
}
