package storetest

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
)

// The model of holds (see the root package's holds.go), written from the
// contract: leases as a plain map of hold id to weight and expiry, read by
// scanning; a hold remembers the request that took it; settling adjusts the
// model's exact state. Hold ids are the model's own ("m1", "m2", ...):
// property tests map them to the stores' ids.

type modelLease struct {
	weight   int64
	expireAt int64
}

type modelHold struct {
	req      sluice.Request // what took it (limits, cost, reserve)
	expireAt int64
	ttl      int64
	done     bool
	windows  map[string]int64 // limit name -> window index charged
	// reset: counters (by model key) reset since the hold charged them.
	// The reset gave the charge back, so a settle corrects nothing there.
	reset map[string]bool
}

// held is the weight of the live leases at key.
func (m *Model) held(key string, now int64) int64 {
	total := int64(0)
	for _, ls := range m.leases[key] {
		if ls.expireAt > now {
			total += ls.weight
		}
	}
	return total
}

// pruneLeases drops the expired leases of r's concurrency limits, as a check
// does, and counts them.
func (m *Model) pruneLeases(r sluice.Request, now int64) int64 {
	n := int64(0)
	for _, l := range r.Limits {
		if l.Algorithm != sluice.AlgorithmConcurrency {
			continue
		}
		for id, ls := range m.leases[modelKey(r, l)] {
			if ls.expireAt <= now {
				delete(m.leases[modelKey(r, l)], id)
				n++
			}
		}
	}
	return n
}

func (m *Model) takeHold(r sluice.Request, now int64) *sluice.Hold {
	m.seq++
	id := fmt.Sprintf("m%d", m.seq)
	ttl := r.HoldTTLOf()
	h := &modelHold{req: r, expireAt: now + ttl.Milliseconds(), ttl: ttl.Milliseconds(), windows: map[string]int64{}}
	for _, l := range r.Limits {
		if l.Algorithm == sluice.AlgorithmSlidingWindow || l.Algorithm == sluice.AlgorithmFixedWindow {
			h.windows[l.Name] = now / l.Window.Milliseconds()
		}
	}
	m.holds[id] = h
	return &sluice.Hold{ID: id, ExpiresIn: ttl}
}

func (m *Model) takeLease(key string, r sluice.Request, now int64, hold *sluice.Hold) {
	if m.leases[key] == nil {
		m.leases[key] = map[string]modelLease{}
	}
	m.leases[key][hold.ID] = modelLease{weight: r.Cost, expireAt: m.holds[hold.ID].expireAt}
}

// Hold applies op (its ID a model id) at its Now, which must be set.
func (m *Model) Hold(op sluice.HoldOp) sluice.HoldResult {
	now := op.Now.UnixMilli()
	h := m.holds[op.ID]
	if h == nil || h.req.Tenant != op.Tenant || now >= h.expireAt+h.ttl {
		return sluice.HoldResult{Status: sluice.HoldUnknown}
	}
	res := sluice.HoldResult{Rule: h.req.Rule, Subject: h.req.Subject}
	switch {
	case h.done:
		res.Status = sluice.HoldFinished
		return res
	case now >= h.expireAt:
		res.Status = sluice.HoldExpired
		return res
	}
	r := h.req
	if op.Action == sluice.HoldExtend {
		h.expireAt = now + h.ttl
		for _, l := range r.Limits {
			if ls, ok := m.leases[modelKey(r, l)][op.ID]; ok && l.Algorithm == sluice.AlgorithmConcurrency {
				ls.expireAt = h.expireAt
				m.leases[modelKey(r, l)][op.ID] = ls
			}
		}
		res.Status, res.ExpiresIn = sluice.HoldExtended, time.Duration(h.ttl)*time.Millisecond
		return res
	}
	res.Status = sluice.HoldReleased
	if op.Action == sluice.HoldSettle {
		res.Status = sluice.HoldSettled
		if r.Reserve {
			// Judged against the limits as they are now: the current limit
			// of the same counter, else the one reserved under.
			current := map[string]sluice.Limit{}
			if op.Limits != nil {
				for _, l := range op.Limits(r.Rule) {
					current[modelKey(r, l)] = l
				}
			}
			for _, l := range r.Limits {
				if l.Algorithm != sluice.AlgorithmConcurrency && r.Cost > op.Cost {
					res.Refunded = true
				}
				if h.reset[modelKey(r, l)] {
					continue
				}
				if c, ok := current[modelKey(r, l)]; ok && l.Algorithm != sluice.AlgorithmConcurrency {
					l = c
				}
				m.settleLimit(r, l, now, h, r.Cost-op.Cost)
			}
		}
	}
	for _, l := range r.Limits {
		if _, ok := m.leases[modelKey(r, l)][op.ID]; ok && l.Algorithm == sluice.AlgorithmConcurrency {
			delete(m.leases[modelKey(r, l)], op.ID)
			res.LeasesFreed++
		}
	}
	h.done = true
	return res
}

// Reset forgets r's subject's counters of r.Limits, as Store.Reset does: its
// leases stay (work in flight ends by release, settle or expiry). What the
// open holds charged those counters is forgotten too, so settling them
// later corrects nothing there: a refund would give the estimate back twice.
func (m *Model) Reset(r sluice.Request) {
	for _, l := range r.Limits {
		if l.Algorithm != sluice.AlgorithmConcurrency {
			key := modelKey(r, l)
			delete(m.buckets, key)
			delete(m.windows, key)
			for _, h := range m.holds {
				if h.reset == nil {
					h.reset = map[string]bool{}
				}
				h.reset[key] = true
			}
		}
	}
}

// settleLimit gives diff units back to l (takes -diff when negative) and
// reports whether anything changed.
func (m *Model) settleLimit(r sluice.Request, l sluice.Limit, now int64, h *modelHold, diff int64) bool {
	key := modelKey(r, l)
	switch l.Algorithm {
	case sluice.AlgorithmConcurrency:
		return false
	case sluice.AlgorithmTokenBucket:
		if diff == 0 {
			return false
		}
		if b := m.buckets[key]; b != nil && now >= b.fullAt {
			delete(m.buckets, key)
		}
		t := m.tokensAt(key, l, now)
		t.Add(t, new(big.Rat).SetInt64(diff))
		if c := new(big.Rat).SetInt64(l.Capacity); t.Cmp(c) > 0 {
			t = c
		} else if debt := new(big.Rat).Neg(c); t.Cmp(debt) < 0 {
			t = debt // debt is at most a full bucket
		}
		b := m.buckets[key]
		if b == nil && t.Cmp(new(big.Rat).SetInt64(l.Capacity)) >= 0 {
			return false // full, as if forgotten
		}
		_, p := l.RefillRate()
		m.buckets[key] = &modelBucket{tokens: t, last: max(now, m.last(key)), unit: p}
		m.buckets[key].fullAt = now + firstFrom(0, m.horizon(r, l, now), func(d int64) bool { return m.empty(r, l, now+d) })
		return true
	}
	w := l.Window.Milliseconds()
	idx := h.windows[l.Name]
	counts := m.windows[key]
	stillCounts := idx == now/w || l.Algorithm == sluice.AlgorithmSlidingWindow && idx == now/w-1
	if diff == 0 || !stillCounts || counts == nil {
		return false
	}
	counts[idx] = max(0, counts[idx]-diff)
	if m.empty(r, l, now) {
		// As in both stores: a window whose counts are all zero is no
		// counter, so a later settle's charge into it changes nothing.
		delete(m.windows, key)
	}
	return true
}

// HoldsMatchModel drives random sequences of checks (concurrency limits
// mixed with rate limits, reservations or not), settles, releases,
// extends and subject resets, with time moving forward in steps of every size, through the
// model and every store, and requires identical answers. It runs rounds
// times rapid's number of cases: the paths of a settle (a sliding window's
// previous window, say) need a few hundred to be reached reliably.
//
// A sixth of the steps change the limits (capacities and rates, the same
// counters), so a settle often meets limits other than it reserved under:
// the test logs how often (about a third of the settles in a run).
func HoldsMatchModel(t *testing.T, stores map[string]sluice.Holder, rounds int) {
	settles.Store(0)
	settlesAfterChange.Store(0)
	for range rounds {
		holdsMatchModel(t, stores)
	}
	t.Logf("%d settles, %d of them after the limits changed since the reserve", settles.Load(), settlesAfterChange.Load())
}

// settles and settlesAfterChange count HoldsMatchModel's settles.
var settles, settlesAfterChange atomic.Int64

// smallest is the smallest capacity of limits.
func smallest(limits []sluice.Limit) int64 {
	c := limits[0].Capacity
	for _, l := range limits {
		c = min(c, l.Capacity)
	}
	return c
}

// changeSmallLimits returns limits (of DrawSmallLimits, perhaps with a
// concurrency limit) with new capacities and refill rates: the same names,
// algorithms and windows, so the same counters.
func changeSmallLimits(rt *rapid.T, limits []sluice.Limit) []sluice.Limit {
	changed := make([]sluice.Limit, len(limits))
	for i, l := range limits {
		l.Capacity = rapid.Int64Range(1, 6).Draw(rt, "new capacity")
		if l.Algorithm == sluice.AlgorithmTokenBucket {
			l.RefillPerSecond = rapid.SampledFrom([]float64{0.5, 1, 2, 3, 4}).Draw(rt, "new rate")
		}
		changed[i] = l
	}
	return changed
}

func holdsMatchModel(t *testing.T, stores map[string]sluice.Holder) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		limits := []sluice.Limit{sluice.Concurrency(int64(rapid.IntRange(1, 5).Draw(rt, "concurrency")),
			time.Duration(rapid.SampledFrom([]int{50, 1000, 5000, 60_000}).Draw(rt, "ttl"))*time.Millisecond).Named("cc")}
		limits = append(limits, DrawSmallLimits(rt)...)
		if rapid.Bool().Draw(rt, "without concurrency") {
			limits = limits[1:]
		}
		minCapacity := smallest(limits)
		model := NewModel()
		tenant := fmt.Sprintf("holdprop-%d", time.Now().UnixNano())
		now := Base.Add(time.Duration(rapid.Int64Range(0, 100_000).Draw(rt, "start")) * time.Millisecond)
		type held struct {
			model  string
			store  map[string]string
			limits []sluice.Limit // as reserved under
		}
		var holds []held
		steps := rapid.IntRange(10, 80).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			now = now.Add(time.Duration(rapid.SampledFrom([]int64{0, 1, 7, 49, 50, 51, 300, 500, 999, 1000, 1001, 2000, 6000}).Draw(rt, "step")) * time.Millisecond)
			if rapid.IntRange(0, 5).Draw(rt, "change limits") == 0 {
				// An operator edits the rule: new capacities and rates,
				// the same counters. Settles are told the limits as they
				// are now (HoldOp.Limits).
				limits = changeSmallLimits(rt, limits)
				minCapacity = smallest(limits)
			}
			if rapid.IntRange(0, 15).Draw(rt, "reset") == 0 {
				// An operator resets a subject, holds in flight or not.
				req := sluice.Request{Tenant: tenant, Rule: "r", Subject: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "reset subject"), Limits: limits}
				model.Reset(req)
				for name, s := range stores {
					if err := s.Reset(ctx, tenant, "r", req.Subject, limits); err != nil {
						rt.Fatalf("step %d: %s reset: %v", i, name, err)
					}
				}
				continue
			}
			if len(holds) > 0 && rapid.Bool().Draw(rt, "hold op") {
				// Mostly one of the latest holds: those are still live.
				h := holds[max(0, len(holds)-1-rapid.IntRange(0, len(holds)-1).Draw(rt, "which hold"))]
				current := limits
				op := sluice.HoldOp{Tenant: tenant, Action: rapid.SampledFrom([]sluice.HoldAction{sluice.HoldSettle, sluice.HoldSettle, sluice.HoldRelease, sluice.HoldExtend}).Draw(rt, "action"), Now: now,
					Limits: func(string) []sluice.Limit { return current }}
				if op.Action == sluice.HoldSettle {
					// The actual cost fits the limits reserved under
					// (sluice.SettleCost), whatever they are now.
					op.Cost = rapid.Int64Range(0, smallest(h.limits)).Draw(rt, "actual")
					if !slices.Equal(h.limits, current) {
						settlesAfterChange.Add(1)
					}
					settles.Add(1)
				}
				mop := op
				mop.ID = h.model
				want := model.Hold(mop)
				for name, s := range stores {
					op.ID = h.store[name]
					got, err := s.Hold(ctx, op)
					if err != nil {
						rt.Fatalf("step %d: %s %s: %v", i, name, op.Action, err)
					}
					if got != want {
						rt.Fatalf("step %d: %s %s at +%dms: got %+v, model %+v", i, name, op.Action, now.Sub(Base).Milliseconds(), got, want)
					}
				}
				continue
			}
			req := sluice.Request{Tenant: tenant, Rule: "r", Subject: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "subject"),
				Limits: limits, Cost: max(0, rapid.Int64Range(-1, minCapacity).Draw(rt, "cost")), Reserve: rapid.IntRange(0, 3).Draw(rt, "reserve") > 0, Now: now}
			want := model.Check(req)
			h := held{model: "", store: map[string]string{}, limits: limits}
			if want.Hold != nil {
				h.model = want.Hold.ID
			}
			for name, s := range stores {
				got, err := s.Check(ctx, req)
				if err != nil {
					rt.Fatalf("step %d: %s: %v", i, name, err)
				}
				if diff := compareHoldDecisions(want, got); diff != "" {
					rt.Fatalf("step %d: %s at +%dms cost %d reserve %v for %s: %s\nmodel: %+v\nstore: %+v",
						i, name, now.Sub(Base).Milliseconds(), req.Cost, req.Reserve, req.Subject, diff, want, got)
				}
				if got.Hold != nil {
					h.store[name] = got.Hold.ID
				}
			}
			if h.model != "" {
				holds = append(holds, h)
			}
		}
	})
}

func compareHoldDecisions(want, got sluice.Decision) string {
	if diff := CompareDecisions(want, got); diff != "" {
		return diff
	}
	if want.ExpiredLeases != got.ExpiredLeases {
		return fmt.Sprintf("expired leases: want %d, got %d", want.ExpiredLeases, got.ExpiredLeases)
	}
	if (want.Hold == nil) != (got.Hold == nil) || want.Hold != nil && want.Hold.ExpiresIn != got.Hold.ExpiresIn {
		return fmt.Sprintf("hold: want %+v, got %+v", want.Hold, got.Hold)
	}
	return ""
}

// CompareDecisions says how got differs from want in the figures every
// store must agree on (top level and per limit), or "" when it does not.
func CompareDecisions(want, got sluice.Decision) string {
	if want.Allowed != got.Allowed || want.Limit != got.Limit || want.Remaining != got.Remaining ||
		want.ResetAfter != got.ResetAfter || want.RetryAfter != got.RetryAfter {
		return fmt.Sprintf("top level: want %v, got %v", want, got)
	}
	if len(want.Limits) != len(got.Limits) {
		return fmt.Sprintf("want %d limits, got %d", len(want.Limits), len(got.Limits))
	}
	for i := range want.Limits {
		if want.Limits[i] != got.Limits[i] {
			return fmt.Sprintf("limit %d: want %+v, got %+v", i, want.Limits[i], got.Limits[i])
		}
	}
	return ""
}
