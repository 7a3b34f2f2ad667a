package memory

import (
	"context"
	"time"

	"github.com/sluicelabs/sluice"
)

// Leases (see the root package's leases.go): a lease is a reserved hold
// whose cost the store chooses under the shard's lock from what the limits
// have left and the holders' demands; returning it settles the hold at
// what was used. Mirrors lease mode in package redis's check.lua.

var _ sluice.Leaser = (*Store)(nil)

// demandSet is the live lease demands of one subject, by holder, and the
// budget the set is counted in (one unit: its size is bounded by
// sluice.MaxLeaseHolders).
type demandSet struct {
	holders map[string]demand
	tenant  *budget
}

type demand struct {
	want     int64
	expireAt int64 // ms
}

// Lease grants req atomically. See sluice.Leaser.
func (s *Store) Lease(ctx context.Context, req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	if err := req.Validate(); err != nil {
		return sluice.LeaseGrant{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.LeaseGrant{}, err
	}
	check := req.Check(0)
	now := s.now(check)
	id := sluice.NewHoldID(req.Tenant, req.Rule, req.Subject)
	tag, nonce, _ := sluice.SplitHoldID(id)
	var stackKeys [512]byte
	keys := buildKeys(stackKeys[:0], req.Tenant, req.Rule, req.Subject, req.Limits)
	sh := s.shardFor(keys.tag())

	var outcomes []outcome
	var returned sluice.LeaseStatus
	var returnedGranted int64
	for attempt := 0; ; attempt++ {
		var full *BudgetError
		sh.mu.Lock()
		if req.Renew != "" && returned == "" {
			// The old lease first, under the same lock, so its units
			// count in this grant. Once returned it stays returned,
			// should the grant need a second attempt.
			res, err := s.returnLocked(sh, sluice.LeaseReturn{Tenant: req.Tenant, ID: req.Renew, Unused: req.RenewUnused}, now)
			if err != nil {
				sh.mu.Unlock()
				return sluice.LeaseGrant{}, err
			}
			returned, returnedGranted = res.Status, res.Granted
		}
		outcomes, check.Cost, full = s.leaseLocked(sh, &keys, req, tag, nonce, now)
		sh.mu.Unlock()
		if full == nil {
			break
		}
		if attempt == 0 && s.reclaim(full, now) {
			continue
		}
		s.refuse(full)
		return sluice.LeaseGrant{}, full
	}
	d := sluice.Decision{Limits: limitDecisions(req.Limits, outcomes)}
	d.Combine()
	if !d.Allowed {
		return sluice.LeaseGrant{Decision: d, Returned: returned, ReturnedGranted: returnedGranted}, nil
	}
	return sluice.LeaseGrant{Decision: d, Granted: check.Cost, ID: id, ExpiresIn: req.TTL, At: time.UnixMilli(now),
		Returned: returned, ReturnedGranted: returnedGranted}, nil
}

// leaseLocked records req's demand, sizes its grant and takes it as a
// reserved hold under nonce, with sh locked. It returns the outcomes and
// the cost decided (the grant, or 1 for a deny). On a BudgetError nothing
// is written.
func (s *Store) leaseLocked(sh *shard, keys *keyList, req sluice.LeaseRequest, tag, nonce string, now int64) ([]outcome, int64, *BudgetError) {
	left := int64(-1)
	for i, l := range req.Limits {
		o := decide(l, live(sh.entries[string(keys.key(i))], now), now, 0)
		if left < 0 || o.remaining < left {
			left = o.remaining
		}
	}
	set := sh.demands[tag]
	total := req.Want
	for holder, dm := range set.holders {
		if dm.expireAt > now && holder != req.Holder {
			total += dm.want
		}
	}
	check := req.Check(sluice.LeaseShare(left, req.Want, total))

	// The demand set takes room like a counter; take it first, so a grant
	// that then finds no room for its counters writes nothing at all.
	var setBudget *budget
	if set.holders == nil {
		var full *BudgetError
		if setBudget, full = s.reserve(req.Tenant, 1); full != nil {
			return nil, 0, full
		}
	}
	if !check.Holds() {
		panic("memory: a lease is a reservation")
	}
	outcomes, _, full := s.decideLocked(sh, keys, check, nonce, now, nil)
	if full != nil {
		if setBudget != nil {
			s.giveBack(setBudget)
		}
		return nil, 0, full
	}
	if set.holders == nil {
		set = demandSet{holders: map[string]demand{}, tenant: setBudget}
		sh.demands[tag] = set
	}
	for holder, dm := range set.holders {
		if dm.expireAt <= now {
			delete(set.holders, holder)
		}
	}
	if _, ok := set.holders[req.Holder]; ok || len(set.holders) < sluice.MaxLeaseHolders {
		expireAt := now + req.TTL.Milliseconds()
		set.holders[req.Holder] = demand{want: req.Want, expireAt: expireAt}
		s.lower(set.tenant, expireAt)
	}
	s.dropDemandSetIfEmpty(sh, tag)
	return outcomes, check.Cost, nil
}

// ReturnLease gives back a lease's unused units. See sluice.Leaser.
func (s *Store) ReturnLease(ctx context.Context, ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	if err := ret.Validate(); err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	now := s.clock().UnixMilli()
	if !ret.Now.IsZero() {
		now = ret.Now.UnixMilli()
	}
	tag, _, _ := sluice.SplitHoldID(ret.ID)
	sh := s.shardFor([]byte(tag))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.returnLocked(sh, ret, now)
}

// returnLocked is ReturnLease with ret's shard locked.
func (s *Store) returnLocked(sh *shard, ret sluice.LeaseReturn, now int64) (sluice.LeaseReturnResult, error) {
	tag, nonce, _ := sluice.SplitHoldID(ret.ID)
	rec := sh.holds[sluice.HoldKey("", tag, nonce)]
	granted := int64(0)
	if rec != nil && len(rec.parts) > 0 {
		granted = rec.parts[0].charged
		// Only a return that would apply is refused for giving back
		// too much; an expired, finished or unknown lease answers its
		// status.
		if rec.tenant == ret.Tenant && !rec.done && now < rec.expireAt && ret.Unused > granted {
			return sluice.LeaseReturnResult{}, sluice.ReturnTooLarge(ret.Unused, granted)
		}
	}
	res, err := s.holdLocked(sh, sluice.HoldOp{Tenant: ret.Tenant, ID: ret.ID, Action: sluice.HoldSettle,
		Cost: max(0, granted-ret.Unused), Now: time.UnixMilli(now)}, tag, nonce, now)
	if err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	out := leaseResult(res)
	if out.Status == sluice.LeaseReturned {
		out.Granted = granted
	}
	return out, nil
}

// leaseResult is a settle's result as a lease return's.
func leaseResult(res sluice.HoldResult) sluice.LeaseReturnResult {
	status := map[sluice.HoldStatus]sluice.LeaseStatus{sluice.HoldSettled: sluice.LeaseReturned,
		sluice.HoldExpired: sluice.LeaseExpired, sluice.HoldFinished: sluice.LeaseFinished}[res.Status]
	if status == "" {
		return sluice.LeaseReturnResult{Status: sluice.LeaseUnknown}
	}
	return sluice.LeaseReturnResult{Status: status, Rule: res.Rule, Subject: res.Subject}
}

// dropDemandSetIfEmpty drops the demand set of tag, and gives its room
// back, once it holds no demand. Called with the shard locked.
func (s *Store) dropDemandSetIfEmpty(sh *shard, tag string) {
	if set, ok := sh.demands[tag]; ok && len(set.holders) == 0 {
		delete(sh.demands, tag)
		s.giveBack(set.tenant)
	}
}

// sweepDemandsLocked drops expired demands, with the shard locked.
func (s *Store) sweepDemandsLocked(sh *shard, now int64) {
	for tag, set := range sh.demands {
		for holder, dm := range set.holders {
			if dm.expireAt <= now {
				delete(set.holders, holder)
			} else {
				s.lower(set.tenant, dm.expireAt)
			}
		}
		s.dropDemandSetIfEmpty(sh, tag)
	}
}
