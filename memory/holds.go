package memory

import (
	"context"
	"slices"
	"time"

	"github.com/sluicelabs/sluice"
)

// Holds (see the root package's holds.go) live in the shard of their
// subject, beside its counters, so a check, its leases and its hold change
// under one lock. The arithmetic is the same, step for step, as holds in
// package redis's check.lua and hold.lua.

var _ sluice.Holder = (*Store)(nil)

// lease is one hold's lease on a concurrency limit.
type lease struct {
	weight   int64
	expireAt int64 // ms
	// keepUntil: the sweeper keeps an expired lease a TTL longer, so the
	// next check can count it as expired unreleased (a crashed holder).
	keepUntil int64
}

// leaseSet is the leases held on one concurrency limit of one subject, by
// hold nonce, and the budget the set is counted in (one unit however many
// leases it holds: their number is bounded by the limit's capacity).
type leaseSet struct {
	leases map[string]lease
	tenant *budget
}

// holdRecord is what a hold took, so that settling it is exact.
type holdRecord struct {
	tenant, rule, subject string
	nonce                 string
	expireAt              int64 // ms; the hold's TTL ends
	ttl                   int64 // ms
	done                  bool  // settled or released
	parts                 []holdPart
	budget                *budget // the record is counted in it until forgotten
}

// holdPart is one limit of a hold: a lease (concurrency) or a reserved
// charge (rate limits, only when the check reserved).
type holdPart struct {
	key     string
	limit   sluice.Limit
	charged int64
	window  int64 // window index charged (windows)
	// reset: the subject's counter was reset since the charge, which gave
	// it all back, so a settle corrects nothing (the store's counter
	// generation, as check.lua keeps it in Redis).
	reset bool
}

// forgetAt is when a record is dropped: it outlives its TTL by as much again,
// so a late settle learns the hold expired rather than that it is unknown.
func (r *holdRecord) forgetAt() int64 { return r.expireAt + r.ttl }

// decideLeases decides a concurrency limit at now for cost: it drops
// expired leases first (counted in expired), then admits while held + cost
// fits. takeUntil is the expiry of the lease the check takes if allowed.
func decideLeases(set map[string]lease, l sluice.Limit, now, cost, takeUntil int64) (o outcome, expired int64) {
	held, latest := int64(0), now
	for nonce, ls := range set {
		if ls.expireAt <= now {
			delete(set, nonce)
			expired++
			continue
		}
		held += ls.weight
		latest = max(latest, ls.expireAt)
	}
	if held+cost <= l.Capacity {
		o.allowed = true
		if cost > 0 {
			o.write = true
			held += cost
			latest = max(latest, takeUntil)
		}
	} else {
		// Fits once enough leases expire, earliest first: an upper bound,
		// since holders usually release sooner.
		byExpiry := make([]lease, 0, len(set))
		for _, ls := range set {
			byExpiry = append(byExpiry, ls)
		}
		slices.SortFunc(byExpiry, func(a, b lease) int { return int(a.expireAt - b.expireAt) })
		left := held
		for _, ls := range byExpiry {
			left -= ls.weight
			if left+cost <= l.Capacity {
				o.retryAfter = ls.expireAt - now
				break
			}
		}
	}
	o.remaining = max(0, l.Capacity-held)
	o.resetAfter = latest - now
	return o, expired
}

// takeHold writes the leases and the record of an allowed check that holds,
// with the shard locked. b is where room was reserved for the record and
// the new lease sets.
func (s *Store) takeHold(sh *shard, keys *keyList, req sluice.Request, nonce string, now int64, outcomes []outcome, b *budget) {
	ttl := req.HoldTTLOf().Milliseconds()
	rec := &holdRecord{tenant: req.Tenant, rule: req.Rule, subject: req.Subject, nonce: nonce, expireAt: now + ttl, ttl: ttl, budget: b}
	s.lower(b, rec.forgetAt())
	for i, l := range req.Limits {
		key := string(keys.key(i))
		switch {
		case l.Algorithm == sluice.AlgorithmConcurrency:
			set, ok := sh.leases[key]
			if !ok {
				set = leaseSet{leases: map[string]lease{}, tenant: b}
				sh.leases[key] = set
			}
			set.leases[nonce] = lease{weight: req.Cost, expireAt: rec.expireAt, keepUntil: rec.expireAt + ttl}
			s.lower(set.tenant, rec.expireAt+ttl)
		case !req.Reserve:
			continue // charged for good
		}
		rec.parts = append(rec.parts, holdPart{key: key, limit: l, charged: req.Cost, window: outcomes[i].next.a})
	}
	sh.holds[sluice.HoldKey("", string(keys.tag()), nonce)] = rec
}

// Hold settles, releases or extends a hold. See sluice.Holder.
func (s *Store) Hold(ctx context.Context, op sluice.HoldOp) (sluice.HoldResult, error) {
	if err := op.Validate(); err != nil {
		return sluice.HoldResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.HoldResult{}, err
	}
	now := s.clock().UnixMilli()
	if !op.Now.IsZero() {
		now = op.Now.UnixMilli()
	}
	tag, nonce, _ := sluice.SplitHoldID(op.ID)
	sh := s.shardFor([]byte(tag))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.holdLocked(sh, op, tag, nonce, now)
}

// holdLocked is Hold with op's shard locked (a lease's renew ends its old
// lease under the same lock as it grants the next).
func (s *Store) holdLocked(sh *shard, op sluice.HoldOp, tag, nonce string, now int64) (sluice.HoldResult, error) {
	rec := sh.holds[sluice.HoldKey("", tag, nonce)]
	if rec == nil || rec.tenant != op.Tenant || now >= rec.forgetAt() {
		return sluice.HoldResult{Status: sluice.HoldUnknown}, nil
	}
	res := sluice.HoldResult{Rule: rec.rule, Subject: rec.subject}
	switch {
	case rec.done:
		res.Status = sluice.HoldFinished
		return res, nil
	case now >= rec.expireAt:
		res.Status = sluice.HoldExpired
		return res, nil
	}
	switch op.Action {
	case sluice.HoldExtend:
		rec.expireAt = now + rec.ttl
		for _, p := range rec.parts {
			if set, ok := sh.leases[p.key]; ok {
				if ls, ok := set.leases[nonce]; ok {
					ls.expireAt, ls.keepUntil = rec.expireAt, rec.expireAt+rec.ttl
					set.leases[nonce] = ls
				}
			}
		}
		res.Status, res.ExpiresIn = sluice.HoldExtended, time.Duration(rec.ttl)*time.Millisecond
		return res, nil
	case sluice.HoldSettle:
		limits := make([]sluice.Limit, len(rec.parts))
		for i, p := range rec.parts {
			limits[i] = p.limit
		}
		if err := sluice.SettleCost(limits, op.Cost); err != nil {
			return sluice.HoldResult{}, err
		}
		// Settling may create a counter (a full bucket going into debt):
		// take its room first, so nothing is written if there is none.
		need := int64(0)
		for _, p := range rec.parts {
			if p.limit.Algorithm == sluice.AlgorithmTokenBucket && !p.reset && op.Cost > p.charged && sh.entries[p.key] == nil {
				need++
			}
		}
		var b *budget
		if need > 0 {
			var full *BudgetError
			if b, full = s.reserve(rec.tenant, need); full != nil {
				return sluice.HoldResult{}, full
			}
		}
		current := currentLimits(op, rec, tag)
		for _, p := range rec.parts {
			if p.limit.Algorithm == sluice.AlgorithmConcurrency {
				continue
			}
			res.Refunded = res.Refunded || p.charged > op.Cost
			if p.reset {
				continue // the reset gave back all the charge
			}
			if l, ok := current[p.key]; ok {
				p.limit = l // judged against the limit as it is now
			}
			e := sh.entries[p.key]
			next, write := settle(p, live(e, now), now, op.Cost)
			if !write {
				continue
			}
			if e != nil {
				s.write(sh, []byte(p.key), e, nil, next)
			} else {
				s.write(sh, []byte(p.key), nil, b, next)
			}
		}
		res.Status = sluice.HoldSettled
	default:
		res.Status = sluice.HoldReleased
	}
	for _, p := range rec.parts {
		if p.limit.Algorithm != sluice.AlgorithmConcurrency {
			continue
		}
		if set, ok := sh.leases[p.key]; ok {
			if _, ok := set.leases[nonce]; ok {
				delete(set.leases, nonce)
				res.LeasesFreed++
			}
			s.dropLeaseSetIfEmpty(sh, p.key)
		}
	}
	rec.done = true
	return res, nil
}

// currentLimits returns op's current limits of rec's rule by counter key,
// or nil when op gives none.
func currentLimits(op sluice.HoldOp, rec *holdRecord, tag string) map[string]sluice.Limit {
	if op.Limits == nil {
		return nil
	}
	limits := op.Limits(rec.rule)
	byKey := make(map[string]sluice.Limit, len(limits))
	for _, l := range limits {
		if l.Algorithm != sluice.AlgorithmConcurrency && l.Validate() == nil {
			byKey[sluice.LimitKey("", tag, l)] = l
		}
	}
	return byKey
}

// settle returns the state of a rate limit after settling part at actual
// cost, and whether it must be written. st is the live state or nil.
func settle(p holdPart, st *state, now, actual int64) (state, bool) {
	l, diff := p.limit, p.charged-actual // diff > 0: a refund
	if diff == 0 {
		return state{}, false
	}
	if l.Algorithm == sluice.AlgorithmTokenBucket {
		// Refill to now, then give back (up to a full bucket) or take (into
		// debt, which later checks wait out, down to minus a full bucket:
		// settles of many holds must not push the figures past what the
		// stores count exactly, nor a subject out for ever).
		n, q := l.RefillRate()
		full := l.Capacity * q
		next := decide(l, st, now, 0).next
		next.a = max(-full, min(full, next.a+diff*q))
		next.expireAt = next.b + ceilDiv(full-next.a, n)
		// A bucket back to full needs no counter.
		return next, st != nil || next.a < full
	}
	if l.Algorithm == sluice.AlgorithmCredits {
		return settleCredits(p, st, now, diff)
	}
	if st == nil {
		return state{}, false // nothing of that window counts any more
	}
	adj := *st
	switch {
	case adj.a == p.window:
		adj.b = max(0, adj.b-diff)
	case l.Algorithm == sluice.AlgorithmSlidingWindow && adj.a == p.window+1:
		adj.c = max(0, adj.c-diff)
	default:
		return state{}, false
	}
	return decide(l, &adj, now, 0).next, true
}

// settleCredits gives a credits limit diff back (> 0) or takes it (< 0,
// down to an empty balance, never below). A refund after a set refill
// replaced the balance the estimate came from changes nothing: the refill
// restored it already.
func settleCredits(p holdPart, st *state, now, diff int64) (state, bool) {
	o := credits(p.limit, st, now, 0)
	if diff > 0 && p.limit.Refill.Mode == sluice.RefillSet && o.next.a != p.window {
		return state{}, false
	}
	o.next.b = max(0, min(sluice.MaxCredits, o.next.b+diff))
	return o.next, true
}

// dropLeaseSetIfEmpty drops the lease set under key, and gives its room
// back, once it holds no lease. Called with the shard locked.
func (s *Store) dropLeaseSetIfEmpty(sh *shard, key string) {
	if set, ok := sh.leases[key]; ok && len(set.leases) == 0 {
		delete(sh.leases, key)
		s.giveBack(set.tenant)
	}
}

// sweepHoldsLocked drops expired leases and forgotten hold records at now,
// giving their room back, and lowers the budgets' soonest to what survives,
// with the shard locked.
func (s *Store) sweepHoldsLocked(sh *shard, now int64) {
	for key, set := range sh.leases {
		for nonce, ls := range set.leases {
			if ls.keepUntil <= now {
				delete(set.leases, nonce)
			} else {
				s.lower(set.tenant, ls.keepUntil)
			}
		}
		s.dropLeaseSetIfEmpty(sh, key)
	}
	for key, rec := range sh.holds {
		if now >= rec.forgetAt() {
			delete(sh.holds, key)
			s.giveBack(rec.budget)
		} else {
			s.lower(rec.budget, rec.forgetAt())
		}
	}
}
