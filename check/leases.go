package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/metrics"
)

// Quota leasing (issue 22, DESIGN.md "Leases"): a rule whose every limit
// says lease "auto" may be served from leases. This instance notices a
// (rule, subject) that is hot here (at least Options.LeaseHotRate checks in
// one second), and asks the store for a lease: a batch of units consumed in
// the store at once, sized to this instance's demand over LeaseTTL. Checks
// of the key then take units in process, without a store call, under the
// key's mutex, so they never admit more than the store granted. A check
// that finds too few units in hand asks the store: one lease call that
// decides (as a check of cost 1) and renews; a deny always comes from the
// store. When the key cools (no check for LeaseCoolAfter, or fewer than
// LeaseHotRate checks a second, measured over a second or so), its lease runs
// out locally, the engine closes, or the rule or subject is forgotten, the
// unused units go back to the store.
//
// Figures of a decision taken in process: each limit's Remaining is what
// the store said at the last lease call plus the units still in hand
// (capped at the limit), so it never claims more than could be admitted;
// ResetAfter is the store's at that call counted down to now, so a window's
// names the end of the window the units came from (the lease is not used
// past it), never a later one.
//
// Exactness over time: a unit is admitted only while its lease is alive
// here, which ends a quarter of LeaseTTL before the store's (measured from
// when the call was sent) and, for a window, before the window the units
// were counted in ends, so units never cross into a window that did not
// count them.
//
// Cold keys pay one atomic add on a fixed table (no allocation) per check
// of a leasing rule; rules that do not lease pay nothing.

// Defaults of the lease Options.
const (
	DefaultLeaseHotRate   = 100
	DefaultLeaseTTL       = time.Second
	DefaultMaxLeasedKeys  = 10_000
	DefaultMaxLeaseUnits  = 10_000
	hotnessSlots          = 4096
	leaseReturnTimeout    = time.Second
	defaultLeaseCoolAfter = 250 * time.Millisecond
)

// leasing is an Engine's lease state.
type leasing struct {
	on        bool // the store leases and leasing is not disabled
	hotRate   uint64
	ttl       time.Duration
	coolAfter time.Duration
	// denyFor bounds how long a deny of a leasing rule is cached: units
	// other holders return early can be granted sooner than its
	// retry_after.
	denyFor  time.Duration
	maxKeys  int
	maxUnits int64
	holder   string
	seed     maphash.Seed
	// hotness counts checks per slot in the current second: the high 32
	// bits are the second, the low 32 the count. Collisions only make a
	// cold key look hot, which costs a lease, never exactness.
	hotness [hotnessSlots]atomic.Uint64

	mu      sync.RWMutex
	entries map[leaseKey]*leaseEntry
	stop    chan struct{}
	done    chan struct{}
	started bool
	closed  bool
}

type leaseKey struct {
	rule    *Rule
	subject string
}

// leaseEntry is one hot key's lease.
type leaseEntry struct {
	rule    *Rule
	subject string

	mu       sync.Mutex
	id       string          // "" when no lease is held
	left     int64           // units in hand
	until    time.Time       // the lease is usable before this (engine clock)
	decision sluice.Decision // the store's at the last lease call
	// at is when decision's waits count from, on the engine's clock.
	at      time.Time
	lastUse time.Time
	// used counts units admitted since since, to size the next want.
	used  int64
	since time.Time
	// renewing, when non-nil, is closed when the lease call in flight ends.
	renewing chan struct{}
	dropped  bool
	// seen counts the key's checks since rateSince (the sweeper's), so a
	// key checked below the hot rate stops leasing even if it never goes
	// idle.
	seen      atomic.Int64
	rateSince time.Time
}

func newLeasing(opts Options, leases bool) *leasing {
	l := &leasing{on: leases && opts.LeaseHotRate >= 0, seed: maphash.MakeSeed(), entries: map[leaseKey]*leaseEntry{},
		holder: opts.LeaseHolder}
	l.hotRate = uint64(opts.LeaseHotRate)
	if opts.LeaseHotRate == 0 {
		l.hotRate = DefaultLeaseHotRate
	}
	l.ttl = opts.LeaseTTL
	if l.ttl <= 0 {
		l.ttl = DefaultLeaseTTL
	}
	l.ttl = l.ttl.Truncate(time.Millisecond)
	if l.ttl < 4*time.Millisecond {
		l.ttl = 4 * time.Millisecond
	}
	l.coolAfter = opts.LeaseCoolAfter
	if l.coolAfter <= 0 {
		l.coolAfter = min(defaultLeaseCoolAfter, l.ttl/2)
	}
	l.denyFor = max(l.coolAfter/5, time.Millisecond)
	l.maxKeys = opts.MaxLeasedKeys
	if l.maxKeys <= 0 {
		l.maxKeys = DefaultMaxLeasedKeys
	}
	l.maxUnits = opts.MaxLeaseUnits
	if l.maxUnits <= 0 {
		l.maxUnits = DefaultMaxLeaseUnits
	}
	l.maxUnits = min(l.maxUnits, sluice.MaxLeaseWant)
	if l.holder == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		l.holder = "sluice-" + hex.EncodeToString(b[:])
	}
	return l
}

// ruleLeases reports whether r's checks may lease: every limit opted in,
// and none is a concurrency limit.
func ruleLeases(limits []sluice.Limit) bool {
	if len(limits) == 0 {
		return false
	}
	for i := range limits {
		if limits[i].Lease != sluice.LeaseAuto || limits[i].Algorithm == sluice.AlgorithmConcurrency {
			return false
		}
	}
	return true
}

// hot returns the lease entry of (r, subject) if the key is hot, making one
// the first time it is; nil for a cold key (then without allocating).
func (l *leasing) hot(e *Engine, r *Rule, subject string, now time.Time) *leaseEntry {
	l.mu.RLock()
	le := l.entries[leaseKey{r, subject}]
	l.mu.RUnlock()
	if le != nil {
		le.seen.Add(1)
		return le
	}
	h := maphash.String(l.seed, subject) ^ r.leaseSalt
	slot := &l.hotness[h%hotnessSlots]
	sec := uint64(now.Unix()) & math.MaxUint32
	for {
		old := slot.Load()
		next := sec<<32 | 1
		if old>>32 == sec {
			next = old + 1
		}
		if slot.CompareAndSwap(old, next) {
			if next&math.MaxUint32 < l.hotRate {
				return nil
			}
			break
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.entries) >= l.maxKeys {
		return nil
	}
	if le = l.entries[leaseKey{r, subject}]; le == nil {
		le = &leaseEntry{rule: r, subject: subject, since: now, lastUse: now, rateSince: now}
		l.entries[leaseKey{r, subject}] = le
		e.metrics.QuotaLeasedKeys(1)
		if !l.started {
			l.started = true
			l.stop, l.done = make(chan struct{}), make(chan struct{})
			go e.sweepLeases(l.stop, l.done)
		}
	}
	return le
}

// take admits cost units from le's lease, if it holds them and is alive.
// Called with le.mu held.
func (le *leaseEntry) take(cost int64, now time.Time) (sluice.Decision, bool) {
	if le.id == "" || le.left < cost || !now.Before(le.until) {
		return sluice.Decision{}, false
	}
	le.left -= cost
	le.used += cost
	le.lastUse = now
	return le.figures(now), true
}

// figures is the decision of an admit from the lease at now: the store's
// last figures plus the units still in hand, its waits counted down from
// le.at. Called with le.mu held.
func (le *leaseEntry) figures(now time.Time) sluice.Decision {
	d := le.decision
	d.Limits = make([]sluice.LimitDecision, len(le.decision.Limits))
	elapsed := max(0, now.Sub(le.at))
	for i, ld := range le.decision.Limits {
		ld.Allowed = true
		ld.RetryAfter = 0
		ld.Remaining = min(ld.Limit, ld.Remaining+le.left)
		ld.ResetAfter = max(0, ld.ResetAfter-elapsed)
		d.Limits[i] = ld
	}
	d.Hold = nil
	d.Combine()
	return d
}

// want sizes the next lease: the units used per second since the last
// call, over the TTL, at least the hot rate's, within every limit and the
// cap. Called with le.mu held.
func (l *leasing) want(le *leaseEntry, limits []sluice.Limit, now time.Time) int64 {
	elapsed := now.Sub(le.since)
	rate := float64(l.hotRate)
	if elapsed >= 10*time.Millisecond && le.used > 0 {
		rate = max(rate, float64(le.used)/elapsed.Seconds())
	}
	w := int64(math.Ceil(rate * l.ttl.Seconds()))
	w = min(max(w, 1), l.maxUnits)
	for i := range limits {
		w = min(w, limits[i].Capacity)
	}
	return max(w, 1)
}

// leaseCheck decides a check of a hot key through its lease: from the
// units in hand, or with one lease call. ok is false when the check must
// go to the store directly (the store cannot lease, the call failed, or
// the lease could not cover the cost): then nothing was admitted.
func (e *Engine) leaseCheck(ctx context.Context, le *leaseEntry, q Query, limits []sluice.Limit) (d sluice.Decision, ok bool, err error) {
	l := e.leases
	for {
		le.mu.Lock()
		now := e.clock()
		if d, ok := le.take(q.Cost, now); ok {
			le.mu.Unlock()
			return d, true, nil
		}
		if le.dropped {
			le.mu.Unlock()
			return d, false, nil
		}
		if wait := le.renewing; wait != nil {
			le.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return d, false, ctx.Err()
			}
		}
		// Renew: the old lease (too few units for this cost, or no
		// longer alive) leaves our hands now; the one lease call gives
		// back what is left of it before it sizes the next grant.
		oldID, oldLeft := le.id, le.left
		le.id, le.left = "", 0
		want := l.want(le, limits, now)
		le.used, le.since, le.lastUse = 0, now, now
		le.renewing = make(chan struct{})
		le.mu.Unlock()

		r := q.Rule
		req := sluice.LeaseRequest{Tenant: r.Namespace, Rule: r.Name, Subject: q.Subject,
			Limits: limits, Holder: l.holder, Want: want, TTL: l.ttl, Now: q.Now}
		if oldLeft > 0 {
			// A fully used lease is left to expire: nothing to give back.
			req.Renew, req.RenewUnused = oldID, oldLeft
		}
		sentAt := e.clock()
		grant, gerr := e.guard.Lease(ctx, req)
		gotAt := e.clock()
		switch {
		case req.Renew == "":
		case gerr != nil:
			// Whether the call returned the old lease is unknown: a
			// return of its own is safe either way (a lease returned
			// once answers finished).
			e.returnLease(r, oldID, oldLeft)
		default:
			e.leaseReturned(r, grant.Returned, oldLeft, q.Subject)
		}
		le.mu.Lock()
		close(le.renewing)
		le.renewing = nil
		if gerr != nil || !grant.Decision.Allowed {
			le.mu.Unlock()
			if gerr != nil {
				// The guard's breaker counted it; the direct check
				// applies the failure mode.
				return d, false, nil
			}
			if q.Cost == 1 {
				return grant.Decision, true, nil // the store's deny
			}
			return d, false, nil
		}
		e.metrics.QuotaLeaseUnits(metrics.QuotaUnitsGranted, grant.Granted)
		le.id, le.left, le.decision = grant.ID, grant.Granted, grant.Decision
		le.at = grantedAt(grant.At, sentAt, gotAt)
		le.until = leaseUntil(sentAt, l.ttl, limits, grant.Decision)
		if le.dropped {
			// Forgotten while the call was in flight: give it back.
			id, left := le.id, le.left
			le.id, le.left = "", 0
			le.mu.Unlock()
			e.returnLease(r, id, left)
			return d, false, nil
		}
		if d, ok := le.take(q.Cost, e.clock()); ok {
			le.mu.Unlock()
			return d, true, nil
		}
		le.mu.Unlock()
		// Granted fewer units than the cost: keep them in hand for
		// the checks to come and decide this one directly.
		return d, false, nil
	}
}

// leaseUntil is when a lease granted by a call sent at sentAt stops being
// usable here: a quarter of its TTL before the store's expiry, and before
// the end of each window its units were counted in.
func leaseUntil(sentAt time.Time, ttl time.Duration, limits []sluice.Limit, d sluice.Decision) time.Time {
	life := ttl - ttl/4
	for i := range limits {
		if i >= len(d.Limits) {
			break
		}
		ra := d.Limits[i].ResetAfter
		switch limits[i].Algorithm {
		case sluice.AlgorithmFixedWindow:
		case sluice.AlgorithmSlidingWindow:
			// After a grant the current window holds units: it ends a
			// window before the count drains.
			if ra > limits[i].Window {
				ra -= limits[i].Window
			}
		default:
			continue
		}
		// The store read its clock in whole milliseconds, rounded down,
		// after sentAt: the window may end up to 1ms before sentAt+ra.
		life = min(life, ra-time.Millisecond)
	}
	return sentAt.Add(life)
}

// grantedAt is the instant, on the engine's clock, that a grant's waits
// count from: the store's own time of it (whole milliseconds, so exact
// where the clocks agree), within the call's send and answer times, which
// bound it whatever the clocks do; the send time when the store does not
// say.
func grantedAt(store, sentAt, gotAt time.Time) time.Time {
	if store.IsZero() {
		return sentAt
	}
	// The store's clock reads whole milliseconds, rounded down.
	if lo := sentAt.Truncate(time.Millisecond); store.Before(lo) {
		return lo
	}
	if store.After(gotAt) {
		return gotAt
	}
	return store
}

// returnLease gives back the unused units of lease id (nothing when id is
// "").
func (e *Engine) returnLease(r *Rule, id string, unused int64) {
	if id == "" {
		return
	}
	if unused == 0 {
		// Fully used: the store lets it expire; nothing to give back.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseReturnTimeout)
	defer cancel()
	res, err := e.guard.ReturnLease(ctx, sluice.LeaseReturn{Tenant: r.Namespace, ID: id, Unused: unused})
	if err != nil {
		res.Status = sluice.LeaseExpired
	}
	e.leaseReturned(r, res.Status, unused, res.Subject)
}

// leaseReturned counts the unused units of a lease of r's subject that
// ended how status says.
func (e *Engine) leaseReturned(r *Rule, status sluice.LeaseStatus, unused int64, subject string) {
	if status != sluice.LeaseReturned {
		e.metrics.QuotaLeaseUnits(metrics.QuotaUnitsExpired, unused)
		return
	}
	e.metrics.QuotaLeaseUnits(metrics.QuotaUnitsReturned, unused)
	// Quota came back without time passing: cached denies are stale.
	e.deny.forget(r.Namespace, r.Name, subject)
}

// sweepLeases returns the leases of keys that cooled or ran out, until
// stop is closed.
func (e *Engine) sweepLeases(stop, done chan struct{}) {
	defer close(done)
	l := e.leases
	tick := time.NewTicker(max(l.coolAfter/2, 5*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := e.clock()
		l.mu.Lock()
		var cooled []*leaseEntry
		for k, le := range l.entries {
			le.mu.Lock()
			idle := now.Sub(le.lastUse) >= l.coolAfter
			if span := now.Sub(le.rateSince); le.renewing == nil && span >= time.Second {
				// Below the hot rate over the last second or so: cold,
				// however steadily it is still checked.
				idle = idle || float64(le.seen.Swap(0)) < float64(l.hotRate)*span.Seconds()
				le.rateSince = now
			}
			expired := le.id != "" && !now.Before(le.until)
			if le.renewing == nil && (idle || expired) {
				cooled = append(cooled, le)
				if idle {
					delete(l.entries, k)
					le.dropped = true
					e.metrics.QuotaLeasedKeys(-1)
				}
			}
			le.mu.Unlock()
		}
		l.mu.Unlock()
		for _, le := range cooled {
			e.endLease(le)
		}
	}
}

// endLease takes le's units out of hand and returns them.
func (e *Engine) endLease(le *leaseEntry) {
	le.mu.Lock()
	id, left := le.id, le.left
	le.id, le.left = "", 0
	le.mu.Unlock()
	e.returnLease(le.rule, id, left)
}

// dropLeases forgets, and returns the units of, every entry match selects.
func (e *Engine) dropLeases(match func(le *leaseEntry) bool) {
	l := e.leases
	l.mu.RLock()
	none := len(l.entries) == 0
	l.mu.RUnlock()
	if none {
		return // the common case, on every reset and settle
	}
	l.mu.Lock()
	var gone []*leaseEntry
	for k, le := range l.entries {
		if match(le) {
			delete(l.entries, k)
			le.mu.Lock()
			le.dropped = true
			le.mu.Unlock()
			gone = append(gone, le)
			e.metrics.QuotaLeasedKeys(-1)
		}
	}
	l.mu.Unlock()
	for _, le := range gone {
		e.endLease(le)
	}
}

// closeLeases stops the sweeper and returns every lease.
func (e *Engine) closeLeases() {
	l := e.leases
	l.mu.Lock()
	l.closed = true
	started := l.started
	l.mu.Unlock()
	if started {
		close(l.stop)
		<-l.done
	}
	e.dropLeases(func(*leaseEntry) bool { return true })
}

// LeasedKeys returns the number of keys this engine holds lease entries
// for.
func (e *Engine) LeasedKeys() int {
	e.leases.mu.RLock()
	defer e.leases.mu.RUnlock()
	return len(e.leases.entries)
}
