// Package storetest holds the behaviour every sluice.Store must have: a
// conformance suite of exact decision sequences (Run), and a plain reference
// model (Model) that property tests compare stores against.
package storetest

import (
	"math"
	"math/big"
	"time"

	"github.com/sluicelabs/sluice"
)

// Model is a deliberately plain reference implementation of the semantics in
// DESIGN.md, written from the formulas rather than from the stores: exact
// rational arithmetic, full per-window history, and retry/reset found by
// searching the future instead of by closed-form expressions. It is slow and
// only meant for tests.
//
// Limits may change between checks (same names, algorithms and windows, so the
// same counters; other capacities or refill rates), and the model defines what
// that means:
//   - A window's counts are kept; the new limit applies to them (a lowered
//     limit can leave a window over it: remaining 0, and even a peek denied
//     until enough has slid out).
//   - A token bucket keeps its level and refills from its last update at the
//     new rate, up to the new capacity. When the rate's unit changes (the
//     denominator of Limit.RefillRate) only whole tokens carry over: never
//     more than were there.
//   - A bucket is forgotten once full under the limits of its last update
//     (fullAt); a later check, whatever its capacity, finds it full. Every
//     check that leaves the bucket unconsumed but would be full later than
//     fullAt updates it (the stores' "extension"), so a retry_after reported
//     under the new limits is never cut short by the old expiry.
//
// The clock may step backwards. A limit is then decided at the time its
// counter was last written (a bucket's last update, the start of the latest
// window counted in) when that is later than the check's time, so a spent
// window never reopens, and the waits it reports (when not zero) are counted
// from the check's own, earlier, time.
type Model struct {
	buckets map[string]*modelBucket
	windows map[string]map[int64]int64 // key -> window index -> count
	// Holds: see holdmodel.go.
	leases map[string]map[string]modelLease // key -> hold id -> lease
	holds  map[string]*modelHold
	seq    int
	// Lease demands: see leasemodel.go.
	demands map[string]map[string]modelDemand // subject tag -> holder -> demand
}

type modelBucket struct {
	tokens *big.Rat
	last   int64
	unit   int64 // the RefillRate interval tokens were last counted in
	fullAt int64 // ms; the bucket is forgotten from then on
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{buckets: map[string]*modelBucket{}, windows: map[string]map[int64]int64{},
		leases: map[string]map[string]modelLease{}, holds: map[string]*modelHold{},
		demands: map[string]map[string]modelDemand{}}
}

func modelKey(r sluice.Request, l sluice.Limit) string {
	return sluice.LimitKey("", sluice.SubjectTag(r.Tenant, r.Rule, r.Subject), l)
}

// rate is tokens per millisecond.
func rate(l sluice.Limit) *big.Rat {
	n, p := l.RefillRate()
	return big.NewRat(n, p)
}

func (m *Model) tokensAt(key string, l sluice.Limit, now int64) *big.Rat {
	c := new(big.Rat).SetInt64(l.Capacity)
	b := m.buckets[key]
	if b == nil {
		return c
	}
	t := new(big.Rat).Set(b.tokens)
	if _, p := l.RefillRate(); p != b.unit {
		// Whole tokens, rounded down also in debt (Div is floor division
		// for the positive denominator): never more than were there.
		t.SetInt(new(big.Int).Div(t.Num(), t.Denom()))
	}
	if now > b.last {
		t.Add(t, new(big.Rat).Mul(big.NewRat(now-b.last, 1), rate(l)))
	}
	if t.Cmp(c) > 0 {
		t = c
	}
	return t
}

func (m *Model) windowUsage(key string, l sluice.Limit, now int64) *big.Rat {
	w := l.Window.Milliseconds()
	idx := now / w
	counts := m.windows[key]
	usage := new(big.Rat).SetInt64(counts[idx])
	if l.Algorithm == sluice.AlgorithmSlidingWindow {
		elapsed := now - idx*w
		usage.Add(usage, big.NewRat(counts[idx-1]*(w-elapsed), w))
	}
	return usage
}

// fits reports whether cost fits limit l at now.
func (m *Model) fits(r sluice.Request, l sluice.Limit, now, cost int64) bool {
	key := modelKey(r, l)
	k := new(big.Rat).SetInt64(cost)
	if l.Algorithm == sluice.AlgorithmConcurrency {
		return m.held(key, now)+cost <= l.Capacity
	}
	if l.Algorithm == sluice.AlgorithmTokenBucket {
		return m.tokensAt(key, l, now).Cmp(k) >= 0
	}
	u := m.windowUsage(key, l, now)
	return u.Add(u, k).Cmp(new(big.Rat).SetInt64(l.Capacity)) <= 0
}

func (m *Model) empty(r sluice.Request, l sluice.Limit, now int64) bool {
	key := modelKey(r, l)
	if l.Algorithm == sluice.AlgorithmConcurrency {
		return m.held(key, now) == 0
	}
	if l.Algorithm == sluice.AlgorithmTokenBucket {
		return m.tokensAt(key, l, now).Cmp(new(big.Rat).SetInt64(l.Capacity)) == 0
	}
	return m.windowUsage(key, l, now).Sign() == 0
}

func (m *Model) remaining(r sluice.Request, l sluice.Limit, now int64) int64 {
	key := modelKey(r, l)
	var left *big.Rat
	if l.Algorithm == sluice.AlgorithmConcurrency {
		return max(0, l.Capacity-m.held(key, now))
	}
	if l.Algorithm == sluice.AlgorithmTokenBucket {
		left = m.tokensAt(key, l, now)
	} else {
		left = new(big.Rat).Sub(new(big.Rat).SetInt64(l.Capacity), m.windowUsage(key, l, now))
	}
	if left.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(left.Num(), left.Denom()).Int64()
}

// firstFrom returns the smallest d in [lo, hi] with ok(d), assuming ok is
// monotonic (false then true); hi if none.
func firstFrom(lo, hi int64, ok func(d int64) bool) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// horizon bounds the searches of the future of l's counter of r at now.
func (m *Model) horizon(r sluice.Request, l sluice.Limit, now int64) int64 {
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket:
		// A bucket's fill time, and the time its debt (from settled holds,
		// at most a capacity deep, but of the capacity at settle time,
		// which may have been larger) takes to refill.
		n, p := l.RefillRate()
		debt := new(big.Rat).Neg(m.tokensAt(modelKey(r, l), l, now))
		debt.Quo(debt, rate(l))
		return l.Capacity*p/n + max(0, new(big.Int).Quo(debt.Num(), debt.Denom()).Int64()) + 2
	case sluice.AlgorithmConcurrency:
		return sluice.MaxHoldTTL.Milliseconds() + 1
	}
	return 2*l.Window.Milliseconds() + 1
}

// Check decides r at its Now (which must be set) and applies it.
func (m *Model) Check(r sluice.Request) sluice.Decision {
	now := r.Now.UnixMilli()
	// A bucket past its fullAt is as good as gone at now. It is set aside
	// rather than deleted: the stores drop such counters lazily, so a clock
	// stepping back before fullAt finds it again, unless this check wrote
	// a new one.
	gone := map[string]*modelBucket{}
	for _, l := range r.Limits {
		key := modelKey(r, l)
		if b := m.buckets[key]; l.Algorithm == sluice.AlgorithmTokenBucket && b != nil && now >= b.fullAt {
			gone[key] = b
			delete(m.buckets, key)
		}
	}
	defer func() {
		for key, b := range gone {
			if m.buckets[key] == nil {
				m.buckets[key] = b
			}
		}
	}()
	expired := m.pruneLeases(r, now)
	// Each limit's own time: now, or later if its counter was written later.
	at := make([]int64, len(r.Limits))
	fits := make([]bool, len(r.Limits))
	allowed := true
	for i, l := range r.Limits {
		at[i] = max(now, m.written(r, l))
		fits[i] = m.fits(r, l, at[i], r.Cost)
		allowed = allowed && fits[i]
	}
	var hold *sluice.Hold
	if allowed && r.Cost > 0 {
		if r.Holds() {
			hold = m.takeHold(r, now)
		}
		for i, l := range r.Limits {
			m.apply(r, l, at[i], hold)
		}
	}
	d := sluice.Decision{}
	for i, l := range r.Limits {
		t, skew := at[i], at[i]-now
		ld := sluice.LimitDecision{
			Name: l.Name, Algorithm: l.Algorithm, Limit: l.Capacity,
			Allowed:   fits[i],
			Remaining: m.remaining(r, l, t),
			Window:    sluice.PolicyWindow(l),
		}
		if !fits[i] {
			ld.RetryAfter = time.Duration(skew+firstFrom(1, m.horizon(r, l, t), func(d int64) bool {
				return m.fits(r, l, t+d, r.Cost)
			})) * time.Millisecond
		}
		if reset := firstFrom(0, m.horizon(r, l, t), func(d int64) bool { return m.empty(r, l, t+d) }); reset > 0 {
			ld.ResetAfter = time.Duration(skew+reset) * time.Millisecond
		}
		d.Limits = append(d.Limits, ld)
		if l.Algorithm == sluice.AlgorithmTokenBucket {
			m.setFullAt(r, l, now, ld.ResetAfter.Milliseconds(), allowed && r.Cost > 0)
		}
	}
	d.Combine()
	d.Hold = hold
	d.ExpiredLeases = expired
	return d
}

func (m *Model) apply(r sluice.Request, l sluice.Limit, now int64, hold *sluice.Hold) {
	key := modelKey(r, l)
	if l.Algorithm == sluice.AlgorithmConcurrency {
		m.takeLease(key, r, now, hold)
		return
	}
	if l.Algorithm == sluice.AlgorithmTokenBucket {
		t := m.tokensAt(key, l, now)
		t.Sub(t, new(big.Rat).SetInt64(r.Cost))
		_, p := l.RefillRate()
		// fullAt is set by setFullAt once the reset is known.
		m.buckets[key] = &modelBucket{tokens: t, last: max(now, m.last(key)), unit: p, fullAt: math.MaxInt64}
		return
	}
	if m.windows[key] == nil {
		m.windows[key] = map[int64]int64{}
	}
	m.windows[key][now/l.Window.Milliseconds()] += r.Cost
}

// written is when l's counter for r was last written: a bucket's last update,
// or the start of the latest window that counts something; MinInt64 if never.
func (m *Model) written(r sluice.Request, l sluice.Limit) int64 {
	key := modelKey(r, l)
	if l.Algorithm == sluice.AlgorithmTokenBucket {
		return m.last(key)
	}
	latest := int64(math.MinInt64)
	for idx, count := range m.windows[key] {
		if count > 0 {
			latest = max(latest, idx*l.Window.Milliseconds())
		}
	}
	return latest
}

func (m *Model) last(key string) int64 {
	if b := m.buckets[key]; b != nil {
		return b.last
	}
	return math.MinInt64
}

// setFullAt records when the bucket of l, reported full reset ms after now,
// is forgotten: a consuming check sets it afresh; any other check only ever
// extends it, carrying the bucket over to l's figures.
func (m *Model) setFullAt(r sluice.Request, l sluice.Limit, now, reset int64, consumed bool) {
	key := modelKey(r, l)
	b := m.buckets[key]
	switch {
	case b == nil:
	case consumed:
		b.fullAt = now + reset
	case now+reset > b.fullAt:
		_, p := l.RefillRate()
		m.buckets[key] = &modelBucket{tokens: m.tokensAt(key, l, now), last: max(now, b.last), unit: p, fullAt: now + reset}
	}
}
