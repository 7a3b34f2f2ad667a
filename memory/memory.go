// Package memory is an in-process sluice.Store: the embedded default, and the
// fallback of the "local" failure mode. Its decisions are identical to those of
// package redis for the same sequence of checks; it just keeps the counters in
// this process, so it limits one instance's traffic, not a fleet's.
//
// The store is sharded by subject and safe for concurrent use.
//
// # Bounded memory without forgetting quota
//
// A counter is forgotten only once dropping it loses nothing: a token bucket
// that has refilled, windows whose counts no longer matter (its expiry; see
// the state type). Such counters are swept in the background every
// SweepInterval, and at once when room is needed. A live counter is never
// evicted: forgetting one would hand its subject a fresh quota, so a flood of
// new subjects could reset the counters of old ones.
//
// Room is bounded twice. Each tenant (sluice.Request.Tenant, the counter
// namespace: a tenant of sluice serve, an Envoy domain, "" for the library
// Limiter) holds at most MaxKeysPerTenant counters, so one tenant's flood
// cannot use up the room of the others; and the store holds at most MaxKeys
// counters in all, a hard memory bound. A check that needs a new counter when
// its tenant, or the store, is at its bound and nothing is back to full fails
// with a *BudgetError, which wraps sluice.ErrStoreUnavailable (the rule's
// failure policy applies, as for any store that cannot answer) and
// ErrBudgetExhausted. It is never admitted silently. Checks of counters that
// already exist go on working, and so do denies and peeks, which create
// nothing. Refusals are counted in Stats and reported to
// Options.OnBudgetExhausted.
//
// Holds (holds.go) take room the same way: each lease set of a concurrency
// limit and each hold record counts as one counter of its tenant and of the
// store, from the check that creates it until it is dropped (a lease set once
// its last lease is released or swept, a record once forgotten, a TTL after
// it ends). A check that would need one past a bound is refused as above and
// takes nothing: no tokens, no lease. A subject's lease demands
// (leases.go) are one more, from the lease call that records the first
// until the last expires.
//
// Bookkeeping: each counter carries a pointer to its tenant's budget. A check
// of existing counters touches no shared state beyond its shard; creating or
// dropping a counter adds one atomic update to its tenant's count and one to
// the store's.
package memory

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
)

// Defaults for the zero Options.
const (
	DefaultMaxKeys = 1_000_000
	// DefaultTenantShare: MaxKeysPerTenant defaults to MaxKeys divided by
	// this (100,000 with the default MaxKeys), so at least ten tenants can
	// each fill their budget.
	DefaultTenantShare   = 10
	DefaultSweepInterval = 10 * time.Second
)

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Clock returns the current time; time.Now when nil. A request's own Now
	// takes precedence.
	Clock func() time.Time
	// MaxKeys bounds the number of counters the store holds (default
	// DefaultMaxKeys). Negative is an error.
	MaxKeys int
	// MaxKeysPerTenant bounds the counters of one tenant (default
	// MaxKeys/DefaultTenantShare, at least 1). It must not exceed MaxKeys.
	// When one namespace uses the store, as with the library Limiter, set it
	// to MaxKeys.
	MaxKeysPerTenant int
	// SweepInterval is how often counters back to full are dropped (default
	// DefaultSweepInterval).
	SweepInterval time.Duration
	// OnBudgetExhausted, if set, is called with the tenant of every check
	// refused for want of room (see the package doc), outside the store's
	// locks. It must be quick: it runs on the check path.
	OnBudgetExhausted func(tenant string)
	// Logger, if set, is told of refusals for want of room: a WARN line at
	// most every RefusalLogInterval, saying how many checks were refused
	// since the last one and why the latest was.
	Logger *slog.Logger
}

// RefusalLogInterval is how often, at most, Options.Logger is told of
// refusals: a flood of new subjects makes one line a minute, not one per
// check.
const RefusalLogInterval = time.Minute

// Validate reports what is wrong with o. The errors wrap sluice.ErrInvalid.
func (o Options) Validate() error {
	if o.MaxKeys < 0 {
		return optionErrorf("MaxKeys must be positive (0 for the default %d), got %d", DefaultMaxKeys, o.MaxKeys)
	}
	if o.MaxKeysPerTenant < 0 {
		return optionErrorf("MaxKeysPerTenant must be positive (0 for MaxKeys/%d), got %d", DefaultTenantShare, o.MaxKeysPerTenant)
	}
	if maxKeys := o.maxKeys(); o.MaxKeysPerTenant > maxKeys {
		return optionErrorf("MaxKeysPerTenant %d exceeds MaxKeys %d: the store can never hold that many counters", o.MaxKeysPerTenant, maxKeys)
	}
	return nil
}

func (o Options) maxKeys() int {
	if o.MaxKeys == 0 {
		return DefaultMaxKeys
	}
	return o.MaxKeys
}

func (o Options) maxKeysPerTenant() int {
	if o.MaxKeysPerTenant == 0 {
		return max(1, o.maxKeys()/DefaultTenantShare)
	}
	return o.MaxKeysPerTenant
}

// optionError is an invalid Options value.
type optionError struct{ msg string }

func optionErrorf(format string, args ...any) error {
	return &optionError{msg: "memory: " + fmt.Sprintf(format, args...)}
}

func (e *optionError) Error() string { return e.msg }
func (e *optionError) Unwrap() error { return sluice.ErrInvalid }

// ErrBudgetExhausted is wrapped by every BudgetError, beside
// sluice.ErrStoreFull and sluice.ErrStoreUnavailable.
var ErrBudgetExhausted = errors.New("counter budget exhausted")

// BudgetError is the error of a check that needed a new counter, lease set or
// hold record when its tenant's budget (or the store's cap) was used up by
// live ones. It wraps ErrBudgetExhausted, sluice.ErrStoreFull (its own
// answer on every face) and sluice.ErrStoreUnavailable (the rule's failure
// mode applies).
type BudgetError struct {
	Tenant string
	// Budget is the bound that was reached: MaxKeysPerTenant, or MaxKeys
	// when Store is set.
	Budget int
	// Store: the store as a whole is full, not the tenant's budget.
	Store bool
}

func (e *BudgetError) Error() string {
	if e.Store {
		return "memory store: counter budget exhausted: the store holds its cap of " + strconv.Itoa(e.Budget) +
			" live counters and holds (MaxKeys), none back to full; tenant " + strconv.Quote(e.Tenant) + " cannot start a new one"
	}
	return "memory store: counter budget exhausted: tenant " + strconv.Quote(e.Tenant) + " holds its budget of " +
		strconv.Itoa(e.Budget) + " live counters and holds (MaxKeysPerTenant), none back to full; a new subject or hold cannot be counted"
}

// Unwrap makes errors.Is true for ErrBudgetExhausted, sluice.ErrStoreFull
// and sluice.ErrStoreUnavailable.
func (e *BudgetError) Unwrap() []error {
	return []error{ErrBudgetExhausted, sluice.ErrStoreFull, sluice.ErrStoreUnavailable}
}

// refuse counts a check refused with full, tells OnBudgetExhausted, and
// the logger at most every RefusalLogInterval.
func (s *Store) refuse(full *BudgetError) {
	n := s.refused.Add(1)
	if s.onRefused != nil {
		s.onRefused(full.Tenant)
	}
	if s.log == nil {
		return
	}
	s.refusalMu.Lock()
	now := time.Now()
	if now.Before(s.nextRefusal) {
		s.refusalMu.Unlock()
		return
	}
	s.nextRefusal = now.Add(RefusalLogInterval)
	since := n - s.loggedRefused
	s.loggedRefused = n
	s.refusalMu.Unlock()
	s.log.Warn("the memory store has no room for new counters: checks that need one get their rule's failure mode (closed: 503 store_full)",
		"refused", since, "tenant", full.Tenant, "error", full.Error(), "next_report_in", RefusalLogInterval.String())
}

// Stats describe a Store's occupancy and refusals.
type Stats struct {
	// Keys is the number of counters, lease sets, hold records and lease
	// demand sets held.
	Keys int
	// Tenants is the number of tenants holding counters (an upper bound
	// between sweeps).
	Tenants int
	// Refused counts the checks refused with a BudgetError since New.
	Refused uint64
}

const shardCount = 64

// Store is an in-process sluice.Store.
type Store struct {
	clock     func() time.Time
	seed      maphash.Seed
	shards    [shardCount]shard
	perTenant int64
	total     budget // every counter; its limit is MaxKeys
	maxKeys   int64
	onRefused func(string)
	refused   atomic.Uint64
	// log, if set, hears of refusals, throttled: refusalMu guards when it
	// was last told, and loggedRefused the count it was told then.
	log           *slog.Logger
	refusalMu     sync.Mutex
	nextRefusal   time.Time
	loggedRefused uint64

	// tenantsMu guards the tenants map. Room is taken from a budget under
	// its read lock, so a sweep, which drops empty budgets under the write
	// lock, never drops one that is about to be used.
	tenantsMu sync.RWMutex
	tenants   map[string]*budget

	// sweepMu serialises sweeps and guards what bounds the ones a full
	// budget asks for, so a tenant pinned at its budget while its counters
	// trickle back to full cannot keep a core busy sweeping: such a sweep
	// runs when the checks that asked for it have paid for it (credit, in
	// entries scanned, reclaimCredit per check), or when the last one is
	// far enough behind in time (nextSweep, monotonic ns).
	sweepMu   sync.Mutex
	credit    int64
	nextSweep int64

	stopSweep chan struct{}
	sweepDone chan struct{}
	closeOnce sync.Once
}

// budget counts the counters of one tenant (or of the whole store).
type budget struct {
	n atomic.Int64
	// soonest is at most the earliest expiry of the counters counted in n,
	// so a full budget whose counters are all live is refused without a
	// sweep: a flood of new subjects costs O(1) per refusal.
	soonest atomic.Int64
}

// take reserves k counters if that keeps n within limit.
func (b *budget) take(k, limit int64) bool {
	for {
		n := b.n.Load()
		if n+k > limit {
			return false
		}
		if b.n.CompareAndSwap(n, n+k) {
			return true
		}
	}
}

// lower makes soonest at most t.
func (b *budget) lower(t int64) {
	for {
		cur := b.soonest.Load()
		if t >= cur || b.soonest.CompareAndSwap(cur, t) {
			return
		}
	}
}

type shard struct {
	mu      sync.Mutex
	entries map[string]*entry
	// leases and holds: see holds.go.
	leases map[string]leaseSet
	holds  map[string]*holdRecord
	// demands: lease demands by subject tag; see leases.go.
	demands map[string]demandSet
}

// entry is a counter and the budget it is counted in.
type entry struct {
	state
	tenant *budget
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store with a background sweeper; Close stops it. It panics if
// opts.Validate fails: options read from configuration should be validated
// first.
func New(opts Options) *Store {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	s := &Store{
		clock:     opts.Clock,
		seed:      maphash.MakeSeed(),
		maxKeys:   int64(opts.maxKeys()),
		perTenant: int64(opts.maxKeysPerTenant()),
		onRefused: opts.OnBudgetExhausted,
		log:       opts.Logger,
		tenants:   make(map[string]*budget),
		stopSweep: make(chan struct{}),
		sweepDone: make(chan struct{}),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.total.soonest.Store(math.MaxInt64)
	for i := range s.shards {
		s.shards[i].entries = make(map[string]*entry)
		s.shards[i].leases = make(map[string]leaseSet)
		s.shards[i].holds = make(map[string]*holdRecord)
		s.shards[i].demands = make(map[string]demandSet)
	}
	interval := opts.SweepInterval
	if interval <= 0 {
		interval = DefaultSweepInterval
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

// Len returns the number of counters, lease sets and hold records held.
func (s *Store) Len() int { return int(s.total.n.Load()) }

// Stats returns the store's occupancy and refusal count.
func (s *Store) Stats() Stats {
	s.tenantsMu.RLock()
	tenants := len(s.tenants)
	s.tenantsMu.RUnlock()
	return Stats{Keys: s.Len(), Tenants: tenants, Refused: s.refused.Load()}
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
	nonce := ""
	if req.Holds() {
		id := sluice.NewHoldID(req.Tenant, req.Rule, req.Subject)
		_, nonce, _ = sluice.SplitHoldID(id)
	}
	var stackKeys [512]byte
	var stackOutcomes [4]outcome
	keys := buildKeys(stackKeys[:0], req.Tenant, req.Rule, req.Subject, req.Limits)
	outcomes := stackOutcomes[:0]
	sh := s.shardFor(keys.tag())

	var expired int64
	for attempt := 0; ; attempt++ {
		var full *BudgetError
		sh.mu.Lock()
		outcomes, expired, full = s.decideLocked(sh, &keys, req, nonce, now, outcomes[:0])
		sh.mu.Unlock()
		if full == nil {
			break
		}
		// Counters back to full may be waiting for the sweeper: sweep now
		// and decide again from scratch, once.
		if attempt == 0 && s.reclaim(full, now) {
			continue
		}
		s.refuse(full)
		return sluice.Decision{}, full
	}

	d := sluice.Decision{Limits: limitDecisions(req.Limits, outcomes), ExpiredLeases: expired}
	d.Combine()
	if d.Allowed && nonce != "" {
		d.Hold = &sluice.Hold{ID: string(keys.tag()) + "." + nonce, ExpiresIn: req.HoldTTLOf()}
	}
	return d, nil
}

// limitDecisions is what a check's outcomes say about each of its limits.
func limitDecisions(limits []sluice.Limit, outcomes []outcome) []sluice.LimitDecision {
	out := make([]sluice.LimitDecision, len(limits))
	for i, l := range limits {
		o := outcomes[i]
		out[i] = sluice.LimitDecision{
			Name:       l.Name,
			Algorithm:  l.Algorithm,
			Allowed:    o.allowed,
			Limit:      l.DecisionLimit(),
			Remaining:  o.remaining,
			ResetAfter: time.Duration(o.resetAfter) * time.Millisecond,
			RetryAfter: time.Duration(o.retryAfter) * time.Millisecond,
			Window:     sluice.PolicyWindow(l),
		}
	}
	return out
}

// decideLocked decides req and writes its counters, its leases and its hold
// (taken under nonce, when not ""), with sh locked. It also returns how many
// expired leases it dropped. When the check is allowed but a counter it must
// create finds no room, it writes nothing and returns the BudgetError.
func (s *Store) decideLocked(sh *shard, keys *keyList, req sluice.Request, nonce string, now int64, outcomes []outcome) ([]outcome, int64, *BudgetError) {
	// found holds each limit's entry, expired or not, so writes need no
	// second lookup.
	var found [sluice.MaxLimits]*entry
	allowed := true
	expired := int64(0)
	takeUntil := now + req.HoldTTLOf().Milliseconds()
	for i, l := range req.Limits {
		var o outcome
		if l.Algorithm == sluice.AlgorithmConcurrency {
			var gone int64
			o, gone = decideLeases(sh.leases[string(keys.key(i))].leases, l, now, req.Cost, takeUntil)
			expired += gone
		} else {
			found[i] = sh.entries[string(keys.key(i))]
			o = decide(l, live(found[i], now), now, req.Cost)
		}
		allowed = allowed && o.allowed
		outcomes = append(outcomes, o)
	}
	if allowed {
		// Lease sets and hold records take room like counters: a hold
		// that finds none writes nothing, not even its tokens.
		need := int64(0)
		for i, l := range req.Limits {
			switch {
			case !outcomes[i].write:
			case l.Algorithm == sluice.AlgorithmConcurrency:
				if _, ok := sh.leases[string(keys.key(i))]; !ok {
					need++
				}
			case found[i] == nil:
				need++
			}
		}
		if nonce != "" {
			need++ // the hold record
		}
		var b *budget
		if need > 0 {
			var full *BudgetError
			if b, full = s.reserve(req.Tenant, need); full != nil {
				return outcomes, expired, full // nothing written
			}
		}
		for i := range outcomes {
			if outcomes[i].write && req.Limits[i].Algorithm != sluice.AlgorithmConcurrency {
				s.write(sh, keys.key(i), found[i], b, outcomes[i].next)
			}
		}
		if nonce != "" {
			s.takeHold(sh, keys, req, nonce, now, outcomes, b)
		}
	} else {
		// Nothing is consumed: the limits that would have allowed report
		// their figures before the request, as a peek sees them.
		for i, l := range req.Limits {
			if !outcomes[i].allowed {
				continue
			}
			if l.Algorithm == sluice.AlgorithmConcurrency {
				outcomes[i], _ = decideLeases(sh.leases[string(keys.key(i))].leases, l, now, 0, now)
			} else {
				outcomes[i] = decide(l, live(found[i], now), now, 0)
			}
		}
	}
	for i, l := range req.Limits {
		// extend is only set for a live counter, so found[i] is not nil.
		if outcomes[i].extend && !(allowed && outcomes[i].write) {
			s.write(sh, keys.key(i), found[i], nil, outcomes[i].next)
		}
		if l.Algorithm == sluice.AlgorithmConcurrency && expired > 0 {
			// Expired leases dropped above may have emptied the set.
			s.dropLeaseSetIfEmpty(sh, string(keys.key(i)))
		}
	}
	return outcomes, expired, nil
}

// live returns e's state, or nil when there is none or it has expired.
func live(e *entry, now int64) *state {
	if e == nil || e.expireAt <= now {
		return nil
	}
	return &e.state
}

// write stores st in e, or, when e is nil, in a new entry under key counted
// in b, where room was reserved. Called with the shard locked.
func (s *Store) write(sh *shard, key []byte, e *entry, b *budget, st state) {
	if e != nil {
		if st.expireAt < e.expireAt {
			// Rare (a token bucket whose rate was raised): keep the
			// budgets' soonest a lower bound.
			s.lower(e.tenant, st.expireAt)
		}
		e.state = st
		return
	}
	s.lower(b, st.expireAt)
	sh.entries[string(key)] = &entry{state: st, tenant: b}
}

// lower makes the soonest of b and of the store at most t, the expiry of
// something counted in b.
func (s *Store) lower(b *budget, t int64) {
	b.lower(t)
	s.total.lower(t)
}

// giveBack returns the room of one counter, lease set or hold record
// counted in b, once it is dropped.
func (s *Store) giveBack(b *budget) {
	b.n.Add(-1)
	s.total.n.Add(-1)
}

// reserve takes room for k new counters, lease sets or hold records of
// tenant, or returns the bound that is reached.
func (s *Store) reserve(tenant string, k int64) (*budget, *BudgetError) {
	s.tenantsMu.RLock()
	if b := s.tenants[tenant]; b != nil {
		full := s.take(b, tenant, k)
		s.tenantsMu.RUnlock()
		return b, full
	}
	s.tenantsMu.RUnlock()
	// A tenant's first counter: the write lock also keeps a sweep from
	// dropping the new budget before room is taken from it.
	s.tenantsMu.Lock()
	defer s.tenantsMu.Unlock()
	b := s.tenants[tenant]
	if b == nil {
		b = new(budget)
		b.soonest.Store(math.MaxInt64)
		s.tenants[tenant] = b
	}
	return b, s.take(b, tenant, k)
}

// take reserves k counters in b and in the store's total. Called with
// tenantsMu held (see there).
func (s *Store) take(b *budget, tenant string, k int64) *BudgetError {
	if !b.take(k, s.perTenant) {
		return &BudgetError{Tenant: tenant, Budget: int(s.perTenant)}
	}
	if !s.total.take(k, s.maxKeys) {
		b.n.Add(-k)
		return &BudgetError{Tenant: tenant, Budget: int(s.maxKeys), Store: true}
	}
	return nil
}

// reclaim sweeps, for a check refused with full at now, when a counter of the
// bound it hit may be back to full. It reports whether the check is worth
// deciding again.
func (s *Store) reclaim(full *BudgetError, now int64) bool {
	b, limit := &s.total, s.maxKeys
	if !full.Store {
		s.tenantsMu.RLock()
		b, limit = s.tenants[full.Tenant], s.perTenant
		s.tenantsMu.RUnlock()
		if b == nil {
			return true // emptied and dropped since: there is room
		}
	}
	if b.n.Load() < limit {
		return true // room was made meanwhile
	}
	if b.soonest.Load() > now {
		return false // every counter of it is live
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if b.soonest.Load() > now {
		return true // another sweep made room meanwhile
	}
	s.credit = min(s.credit+reclaimCredit, s.maxKeys)
	start := monotonic()
	if cost := s.total.n.Load(); s.credit >= cost {
		s.credit -= cost
	} else if start < s.nextSweep {
		return false
	}
	s.sweepLocked(now)
	end := monotonic()
	s.nextSweep = end + 8*(end-start)
	return true
}

// reclaimCredit is how many entries a sweep may scan per check that asks for
// one: what a scan of one shard of a full store used to cost.
const reclaimCredit = 64

// clockBase anchors monotonic: durations since it use the monotonic clock.
var clockBase = time.Now()

func monotonic() int64 { return int64(time.Since(clockBase)) }

// Reset forgets subject's counters for the given limits; a concurrency
// limit's leases stay until released, settled or expired.
func (s *Store) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	if err := sluice.Limits(limits).Validate(); err != nil {
		return err
	}
	var stackKeys [512]byte
	keys := buildKeys(stackKeys[:0], tenant, rule, subject, limits)
	sh := s.shardFor(keys.tag())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range limits {
		// Leases are left alone: they stand for work still running, which
		// ends by release, settle or expiry, so a reset never lets more
		// than a concurrency limit in flight.
		if e := sh.entries[string(keys.key(i))]; e != nil {
			s.drop(sh, string(keys.key(i)), e)
		}
	}
	// The holds' charges on these counters are forgotten with them: a
	// later settle must not refund (or charge) the fresh counters.
	for _, rec := range sh.holds {
		for j := range rec.parts {
			p := &rec.parts[j]
			if p.limit.Algorithm == sluice.AlgorithmConcurrency {
				continue
			}
			for i := range limits {
				if p.key == string(keys.key(i)) {
					p.reset = true
				}
			}
		}
	}
	return nil
}

// drop deletes the entry e under key. Called with the shard locked.
func (s *Store) drop(sh *shard, key string, e *entry) {
	delete(sh.entries, key)
	s.giveBack(e.tenant)
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

// Sweep drops every counter back to full now. The background sweeper calls
// it; it is exported for tests and for callers that want memory back at once.
func (s *Store) Sweep() {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.sweepLocked(s.clock().UnixMilli())
}

// sweepLocked drops every counter expired at now, recomputes the budgets'
// soonest, and forgets the budgets of tenants left without counters. Called
// with sweepMu held.
func (s *Store) sweepLocked(now int64) {
	// soonest starts over from the counters that survive. Counters created
	// or lowered meanwhile lower it themselves, so it stays a lower bound
	// once the sweep ends; until then a full budget may be refused
	// although the sweep is about to make room, which denies nothing it
	// should not.
	s.tenantsMu.RLock()
	for _, b := range s.tenants {
		b.soonest.Store(math.MaxInt64)
	}
	s.tenantsMu.RUnlock()
	s.total.soonest.Store(math.MaxInt64)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if e.expireAt <= now {
				s.drop(sh, k, e)
			} else {
				s.lower(e.tenant, e.expireAt)
			}
		}
		s.sweepHoldsLocked(sh, now)
		s.sweepDemandsLocked(sh, now)
		sh.mu.Unlock()
	}
	s.tenantsMu.Lock()
	for t, b := range s.tenants {
		if b.n.Load() == 0 {
			delete(s.tenants, t)
		}
	}
	s.tenantsMu.Unlock()
}
