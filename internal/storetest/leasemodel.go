package storetest

import (
	"github.com/sluicelabs/sluice"
)

// The model of leases (see the root package's leases.go), written from the
// contract: a lease is a reservation whose cost is what the limits have
// left, shared in proportion to the holders' demands when they ask for
// more; its return is a settle at what was used. Lease ids are the model's
// hold ids ("m1", ...).

type modelDemand struct {
	want     int64
	expireAt int64
}

// Lease grants req at its Now, which must be set. req must be valid, but
// for its Renew: a model id, whose return (first) may be too large.
func (m *Model) Lease(req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	var returned sluice.LeaseReturnResult
	if req.Renew != "" {
		res, err := m.ReturnLease(sluice.LeaseReturn{Tenant: req.Tenant, ID: req.Renew, Unused: req.RenewUnused, Now: req.Now})
		if err != nil {
			return sluice.LeaseGrant{}, err
		}
		returned = res
	}
	g := m.lease(req)
	g.Returned, g.ReturnedGranted = returned.Status, returned.Granted
	return g, nil
}

func (m *Model) lease(req sluice.LeaseRequest) sluice.LeaseGrant {
	now := req.Now.UnixMilli()
	probe := req.Check(0)
	left := int64(-1)
	for _, l := range req.Limits {
		if r := m.remaining(probe, l, now); left < 0 || r < left {
			left = r
		}
	}
	tag := sluice.SubjectTag(req.Tenant, req.Rule, req.Subject)
	demands := m.demands[tag]
	if demands == nil {
		demands = map[string]modelDemand{}
		m.demands[tag] = demands
	}
	total := req.Want
	for holder, dm := range demands {
		if dm.expireAt <= now {
			delete(demands, holder)
		} else if holder != req.Holder {
			total += dm.want
		}
	}
	if _, known := demands[req.Holder]; known || len(demands) < sluice.MaxLeaseHolders {
		demands[req.Holder] = modelDemand{want: req.Want, expireAt: now + req.TTL.Milliseconds()}
	}
	// Everything left when it covers every demand, else a share of it in
	// proportion to this holder's demand, at least one unit; a check of
	// one unit, denied, when nothing is left.
	grant := int64(1)
	switch {
	case left == 0:
	case total <= left:
		grant = min(req.Want, left)
	default:
		grant = min(req.Want, left, max(1, left*req.Want/total))
	}
	d := m.Check(req.Check(grant))
	if !d.Allowed {
		return sluice.LeaseGrant{Decision: d}
	}
	id := d.Hold.ID
	d.Hold = nil
	return sluice.LeaseGrant{Decision: d, Granted: grant, ID: id, ExpiresIn: req.TTL}
}

// ReturnLease applies ret (its ID a model id) at its Now, which must be set.
func (m *Model) ReturnLease(ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	now := ret.Now.UnixMilli()
	h := m.holds[ret.ID]
	if h != nil && h.req.Tenant == ret.Tenant && !h.done && now < h.expireAt && ret.Unused > h.req.Cost {
		return sluice.LeaseReturnResult{}, sluice.ReturnTooLarge(ret.Unused, h.req.Cost)
	}
	cost := int64(0)
	if h != nil {
		cost = max(0, h.req.Cost-ret.Unused)
	}
	res := m.Hold(sluice.HoldOp{Tenant: ret.Tenant, ID: ret.ID, Action: sluice.HoldSettle, Cost: cost, Now: ret.Now})
	switch res.Status {
	case sluice.HoldSettled:
		return sluice.LeaseReturnResult{Status: sluice.LeaseReturned, Rule: res.Rule, Subject: res.Subject, Granted: h.req.Cost}, nil
	case sluice.HoldExpired:
		return sluice.LeaseReturnResult{Status: sluice.LeaseExpired, Rule: res.Rule, Subject: res.Subject}, nil
	case sluice.HoldFinished:
		return sluice.LeaseReturnResult{Status: sluice.LeaseFinished, Rule: res.Rule, Subject: res.Subject}, nil
	}
	return sluice.LeaseReturnResult{Status: sluice.LeaseUnknown}, nil
}
