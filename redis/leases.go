package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
)

// Leases (see the root package's leases.go): a grant is a check in lease
// mode (check.lua's lease_cost), a reserved hold whose cost the script
// chooses from what the limits have left and the holders' demands, kept in
// a hash beside the subject's counters under the same hash tag; a return is
// the hold's settle at what was used. One script call each.

var _ sluice.Leaser = (*Store)(nil)

// Lease grants req in one script call. See sluice.Leaser.
func (s *Store) Lease(ctx context.Context, req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	if err := req.Validate(); err != nil {
		return sluice.LeaseGrant{}, err
	}
	check := req.Check(req.Want)
	call, hold := s.withHold(buildCall(s.prefix, check), check)
	tag, _, _ := sluice.SplitHoldID(hold.ID)
	call.keys = append(call.keys, sluice.DemandKey(s.prefix, tag))
	call.args = append(call.args[:len(call.args)-1], strconv.FormatInt(req.Want, 10), req.Holder)
	size := 4 + 4*len(req.Limits)
	if req.Renew != "" {
		// The old lease's record is under the same hash tag (Validate).
		_, oldNonce, _ := sluice.SplitHoldID(req.Renew)
		call.keys = append(call.keys, sluice.HoldKey(s.prefix, tag, oldNonce))
		call.args = append(call.args, oldNonce, strconv.FormatInt(req.RenewUnused, 10), "R")
		size += 2
	} else {
		call.args = append(call.args, "L")
	}
	// Even a denied lease records its holder's demand: always a write.
	reply, err := s.execScript(ctx, call.keys, call.args, true, func([]rueidis.RedisMessage) bool { return true })
	if err != nil {
		return sluice.LeaseGrant{}, unavailable("lease", err)
	}
	if len(reply) == 2 && reply[0].IsString() {
		if status, _ := reply[0].ToString(); status == "too_many" {
			granted, _ := replyInt(&reply[1])
			return sluice.LeaseGrant{}, sluice.ReturnTooLarge(req.RenewUnused, granted)
		}
	}
	if len(reply) != size {
		return sluice.LeaseGrant{}, unavailable("lease", fmt.Errorf("script replied %d values for %d limits", len(reply), len(req.Limits)))
	}
	d := sluice.Decision{}
	if d.Limits, err = limitDecisions(reply[2:], req.Limits); err != nil {
		return sluice.LeaseGrant{}, unavailable("lease", err)
	}
	granted, err := replyInt(&reply[3+4*len(req.Limits)])
	if err != nil {
		return sluice.LeaseGrant{}, unavailable("lease", err)
	}
	at, err := replyInt(&reply[1])
	if err != nil {
		return sluice.LeaseGrant{}, unavailable("lease", err)
	}
	var returned sluice.LeaseStatus
	var returnedGranted int64
	if req.Renew != "" {
		status, err := reply[size-2].ToString()
		if err != nil {
			return sluice.LeaseGrant{}, unavailable("lease", err)
		}
		returned = leaseStatus(sluice.HoldStatus(status))
		if returnedGranted, err = replyInt(&reply[size-1]); err != nil {
			return sluice.LeaseGrant{}, unavailable("lease", err)
		}
	}
	d.Combine()
	if !d.Allowed {
		return sluice.LeaseGrant{Decision: d, Returned: returned, ReturnedGranted: returnedGranted}, nil
	}
	return sluice.LeaseGrant{Decision: d, Granted: granted, ID: hold.ID, ExpiresIn: req.TTL, At: time.UnixMilli(at),
		Returned: returned, ReturnedGranted: returnedGranted}, nil
}

// ReturnLease gives back a lease's unused units in one script call. See
// sluice.Leaser.
func (s *Store) ReturnLease(ctx context.Context, ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	if err := ret.Validate(); err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	tag, nonce, _ := sluice.SplitHoldID(ret.ID)
	now := ""
	if !ret.Now.IsZero() {
		now = strconv.FormatInt(ret.Now.UnixMilli(), 10)
	}
	keys := []string{sluice.HoldKey(s.prefix, tag, nonce)}
	args := []string{"hold", now, "l", strconv.FormatInt(ret.Unused, 10), ret.Tenant, nonce}
	reply, err := s.execScript(ctx, keys, args, true, holdChanged)
	if err != nil {
		return sluice.LeaseReturnResult{}, unavailable("return lease", err)
	}
	if len(reply) == 0 {
		return sluice.LeaseReturnResult{}, unavailable("return lease", fmt.Errorf("script replied nothing"))
	}
	status, err := reply[0].ToString()
	if err != nil {
		return sluice.LeaseReturnResult{}, unavailable("return lease", err)
	}
	if status == "too_many" && len(reply) == 2 {
		granted, _ := replyInt(&reply[1])
		return sluice.LeaseReturnResult{}, sluice.ReturnTooLarge(ret.Unused, granted)
	}
	if len(reply) != 6 && len(reply) != 7 {
		return sluice.LeaseReturnResult{}, unavailable("return lease", fmt.Errorf("script replied %d values", len(reply)))
	}
	res := sluice.HoldResult{Status: sluice.HoldStatus(status)}
	res.Rule, _ = reply[1].ToString()
	res.Subject, _ = reply[2].ToString()
	status2 := leaseStatus(res.Status)
	if status2 == sluice.LeaseUnknown {
		return sluice.LeaseReturnResult{Status: sluice.LeaseUnknown}, nil
	}
	out := sluice.LeaseReturnResult{Status: status2, Rule: res.Rule, Subject: res.Subject}
	if len(reply) == 7 {
		out.Granted, _ = replyInt(&reply[6])
	}
	return out, nil
}

// leaseStatus is a settle's status as a lease return's.
func leaseStatus(s sluice.HoldStatus) sluice.LeaseStatus {
	status := map[sluice.HoldStatus]sluice.LeaseStatus{sluice.HoldSettled: sluice.LeaseReturned,
		sluice.HoldExpired: sluice.LeaseExpired, sluice.HoldFinished: sluice.LeaseFinished}[s]
	if status == "" {
		return sluice.LeaseUnknown
	}
	return status
}
