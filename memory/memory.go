// Package memory is an in-process sluice.Store: the embedded default, and the
// fallback of the "local" failure mode. Its decisions are identical to those of
// package redis for the same sequence of checks; it just keeps the counters in
// this process, so it limits one instance's traffic, not a fleet's.
//
// The store is sharded by subject, safe for concurrent use, forgets a counter
// as soon as dropping it loses nothing (a full bucket, an expired window), and
// holds at most MaxKeys counters.
package memory

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/sluicelabs/sluice"
)

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Clock returns the current time; time.Now when nil. A request's own Now
	// takes precedence.
	Clock func() time.Time
	// MaxKeys caps the number of counters held (default 1,000,000). The cap
	// is kept per shard, MaxKeys/64 each (at least one), so the store holds at
	// most max(MaxKeys, 64) counters. When a shard is full, expired counters
	// are dropped first, then the ones closest to expiring, which lose the
	// least.
	MaxKeys int
	// SweepInterval is how often expired counters are dropped (default 10s).
	SweepInterval time.Duration
}

const shardCount = 64

// Store is an in-process sluice.Store.
type Store struct {
	clock     func() time.Time
	seed      maphash.Seed
	shards    [shardCount]shard
	perShard  int
	stopSweep chan struct{}
	sweepDone chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu      sync.Mutex
	entries map[string]*state
	// soonest is at most the earliest expiry of any entry, so a full shard
	// with nothing expired is not scanned again on every insert (a flood of
	// new subjects would otherwise cost a scan of the whole shard per check).
	soonest int64
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store with a background sweeper; Close stops it.
func New(opts Options) *Store {
	s := &Store{
		clock:     opts.Clock,
		seed:      maphash.MakeSeed(),
		stopSweep: make(chan struct{}),
		sweepDone: make(chan struct{}),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 1_000_000
	}
	s.perShard = max(1, maxKeys/shardCount)
	for i := range s.shards {
		s.shards[i].entries = make(map[string]*state)
	}
	interval := opts.SweepInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	go s.sweepLoop(interval)
	return s
}

// Close stops the background sweeper. The store keeps answering checks.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stopSweep)
		<-s.sweepDone
	})
	return nil
}

// Len returns the number of counters held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// shardFor picks the shard by subject tag: every key of one check lives in one
// shard, so one lock makes the check atomic.
func (s *Store) shardFor(tag []byte) *shard {
	return &s.shards[maphash.Bytes(s.seed, tag)%shardCount]
}

func (s *Store) now(req sluice.Request) int64 {
	if !req.Now.IsZero() {
		return req.Now.UnixMilli()
	}
	return s.clock().UnixMilli()
}

// Check decides req atomically. See sluice.Store.
func (s *Store) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	if err := req.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.Decision{}, err
	}
	now := s.now(req)
	var stackKeys [512]byte
	var stackOutcomes [4]outcome
	keys := buildKeys(stackKeys[:0], req.Tenant, req.Rule, req.Subject, req.Limits)
	outcomes := stackOutcomes[:0]
	sh := s.shardFor(keys.tag())

	sh.mu.Lock()
	allowed := true
	for i, l := range req.Limits {
		o := decide(l, sh.live(keys.key(i), now), now, req.Cost)
		allowed = allowed && o.allowed
		outcomes = append(outcomes, o)
	}
	if allowed {
		for i := range outcomes {
			if outcomes[i].write {
				s.store(sh, keys.key(i), outcomes[i].next, now)
			}
		}
	} else {
		// Nothing is consumed: the limits that would have allowed report
		// their figures before the request, as a peek sees them.
		for i, l := range req.Limits {
			if outcomes[i].allowed {
				outcomes[i] = decide(l, sh.live(keys.key(i), now), now, 0)
			}
		}
	}
	for i := range outcomes {
		if outcomes[i].extend && !(allowed && outcomes[i].write) {
			s.store(sh, keys.key(i), outcomes[i].next, now)
		}
	}
	sh.mu.Unlock()

	d := sluice.Decision{Limits: make([]sluice.LimitDecision, len(req.Limits))}
	for i, l := range req.Limits {
		o := outcomes[i]
		d.Limits[i] = sluice.LimitDecision{
			Name:       l.Name,
			Algorithm:  l.Algorithm,
			Allowed:    o.allowed,
			Limit:      l.Capacity,
			Remaining:  o.remaining,
			ResetAfter: time.Duration(o.resetAfter) * time.Millisecond,
			RetryAfter: time.Duration(o.retryAfter) * time.Millisecond,
			Window:     sluice.PolicyWindow(l),
		}
	}
	d.Combine()
	return d, nil
}

// live returns key's state, or nil when there is none or it has expired.
// Called with the shard locked.
func (sh *shard) live(key []byte, now int64) *state {
	st := sh.entries[string(key)]
	if st != nil && st.expireAt <= now {
		return nil
	}
	return st
}

// store writes st under key, making room if the shard is full. Called with the
// shard locked.
func (s *Store) store(sh *shard, key []byte, st state, now int64) {
	sh.soonest = min(sh.soonest, st.expireAt)
	if cur, ok := sh.entries[string(key)]; ok {
		*cur = st
		return
	}
	if len(sh.entries) >= s.perShard {
		evict(sh, now)
		// evict may have recomputed soonest from the entries alone.
		sh.soonest = min(sh.soonest, st.expireAt)
	}
	fresh := st
	sh.entries[string(key)] = &fresh
}

// evict drops expired entries; if none were, it drops the entry closest to
// expiring among a few sampled (map iteration order is random), which loses
// the least state.
func evict(sh *shard, now int64) {
	if sh.soonest <= now {
		before := len(sh.entries)
		sh.soonest = math.MaxInt64
		for k, st := range sh.entries {
			if st.expireAt <= now {
				delete(sh.entries, k)
			} else {
				sh.soonest = min(sh.soonest, st.expireAt)
			}
		}
		if len(sh.entries) < before {
			return
		}
	}
	victim, soonest, sampled := "", int64(0), 0
	for k, st := range sh.entries {
		if victim == "" || st.expireAt < soonest {
			victim, soonest = k, st.expireAt
		}
		if sampled++; sampled == 8 {
			break
		}
	}
	delete(sh.entries, victim)
}

// Reset forgets subject's counters for the given limits.
func (s *Store) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	if err := sluice.ValidateLimits(limits); err != nil {
		return err
	}
	var stackKeys [512]byte
	keys := buildKeys(stackKeys[:0], tenant, rule, subject, limits)
	sh := s.shardFor(keys.tag())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range limits {
		delete(sh.entries, string(keys.key(i)))
	}
	return nil
}

func (s *Store) sweepLoop(interval time.Duration) {
	defer close(s.sweepDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep drops every expired counter now. The background sweeper calls it; it
// is exported for tests and for callers that want memory back at once.
func (s *Store) Sweep() {
	now := s.clock().UnixMilli()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, st := range sh.entries {
			if st.expireAt <= now {
				delete(sh.entries, k)
			}
		}
		sh.mu.Unlock()
	}
}
