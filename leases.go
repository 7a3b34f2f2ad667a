package sluice

import (
	"context"
	"time"
)

// Leases are the store's half of quota leasing (issue 22): the foundation
// the check engine builds on (package check, leases.go).

// MaxLeaseWant bounds LeaseRequest.Want. With at most MaxLeaseHolders
// demands per key, the proportional share's products stay below 2^52, which
// Redis's Lua numbers hold exactly.
const MaxLeaseWant = 1 << 20

// MaxLeaseHolders bounds the holders whose demand a key remembers at once. A
// holder beyond it is granted by its own demand against the others' but not
// remembered until one of theirs expires; the bound also bounds the work of
// summing demands on every grant.
const MaxLeaseHolders = 1000

// LeaseRequest asks the store for a lease: up to Want units of every limit
// of one rule and subject, consumed now as if admitted, for Holder, for TTL.
type LeaseRequest struct {
	Tenant  string
	Rule    string
	Subject string
	// Limits are the rule's limits; every one must be a rate limit (token
	// bucket, sliding or fixed window): a concurrency limit never leases.
	Limits []Limit
	// Holder names who holds the lease (an instance, a remote client):
	// 1-64 letters, digits, '_', '.' or '-', starting with a letter or
	// digit. The store remembers each holder's demand by this name.
	Holder string
	// Want is the holder's demand: the most units it asks for, at least 1,
	// at most MaxLeaseWant and at most every limit's capacity. The store
	// records it as the holder's demand for TTL (replacing the one it
	// reported before), and sizes every holder's grants by these demands.
	Want int64
	// TTL is how long the lease lives (1ms to MaxHoldTTL, whole
	// milliseconds), and how long the holder's demand is remembered.
	TTL time.Duration
	// Renew, when not "", is the id of the holder's previous lease of the
	// same tenant, rule and subject, ended in the same atomic call before
	// this grant is sized: its RenewUnused units go back exactly as
	// ReturnLease would give them back, so a renew is one store call and
	// the returned units can be granted again at once. Its outcome is
	// LeaseGrant.Returned, set on a deny too. After an error other than
	// ErrInvalid the old lease may or may not have been returned (a store
	// out of room refuses the grant after the return): a ReturnLease of
	// it is safe either way, answering finished if it was.
	Renew       string
	RenewUnused int64
	// Now, when non-zero, is the time of the call (tests only).
	Now time.Time
}

// LeaseGrant is the store's answer to a LeaseRequest.
//
// A lease call is a check that decides and renews at once: when every
// limit has at least one unit left it is allowed and grants Granted units,
// 1 <= Granted <= Want, consumed from every limit; otherwise it is a deny
// of a check of cost 1, with that check's exact RetryAfter, and consumes
// and grants nothing.
//
// How much is granted: let left be the fewest units any of the limits has
// left, and demand the sum of the live demands of every holder of the key,
// this one's Want included. When demand <= left every holder can have what
// it wants: Granted = min(Want, left). Otherwise left is shared in
// proportion to demand (Doorman's PROPORTIONAL_SHARE, of what is left):
// Granted = max(1, floor(left*Want/demand)), so a holder that asks first
// cannot take what the others asked for, and none starves: each call that
// finds a unit left gets one.
type LeaseGrant struct {
	// Decision is the check's: on an allow its figures are after the grant
	// (Remaining counts what is left for other holders), on a deny those of
	// a check of cost 1 that was denied. Decision.Hold is nil: the lease is
	// ID.
	Decision Decision
	// Granted is the units the holder may admit, 0 on a deny.
	Granted int64
	// ID names the lease in ReturnLease: a hold id (see Hold), bound to the
	// tenant, rule and subject. Empty on a deny.
	ID string
	// ExpiresIn is the lease's TTL.
	ExpiresIn time.Duration
	// At is the store's clock when it decided (zero when the store does
	// not say): Decision's waits count from it, so a holder deciding in
	// process later can count them down from the right instant.
	At time.Time
	// Returned is how the return of LeaseRequest.Renew ended ("" without
	// one), and ReturnedGranted what that lease had granted when Returned
	// is LeaseReturned (else 0), as LeaseReturnResult.Granted.
	Returned        LeaseStatus
	ReturnedGranted int64
}

// LeaseReturn gives back the units a holder did not use, ending its lease.
type LeaseReturn struct {
	// Tenant must be the tenant of the lease: another tenant's lease is
	// LeaseUnknown.
	Tenant string
	ID     string
	// Unused is how many of the granted units were not admitted, 0 to
	// Granted. They go back to each limit the lease took them from: a token
	// bucket gets them back (up to its capacity), a window gets its count
	// lowered in the window the grant was counted in, while that window
	// still counts; once it has ended they are simply gone.
	Unused int64
	// Now, when non-zero, is the time of the call (tests only).
	Now time.Time
}

// LeaseStatus is how a ReturnLease ended.
type LeaseStatus string

const (
	// LeaseReturned: the lease ended and its unused units went back.
	LeaseReturned LeaseStatus = "returned"
	// LeaseExpired: the lease's TTL had passed; its units stay consumed
	// and nothing changed.
	LeaseExpired LeaseStatus = "expired"
	// LeaseFinished: the lease was returned before; nothing changed.
	LeaseFinished LeaseStatus = "finished"
	// LeaseUnknown: the store knows no such lease of this tenant (never
	// granted, another tenant's, or forgotten a TTL after it expired);
	// nothing changed.
	LeaseUnknown LeaseStatus = "unknown"
)

// LeaseReturnResult is a store's answer to a LeaseReturn.
type LeaseReturnResult struct {
	Status LeaseStatus
	// Rule and Subject are the lease's, when it was found, so callers can
	// forget cached denies the returned units made stale.
	Rule    string
	Subject string
	// Granted is what the lease granted, when Status is LeaseReturned
	// (else 0): with the units given back it says how many its holder
	// admitted.
	Granted int64
}

// Leaser is a Holder that also leases (see LeaseRequest and LeaseGrant).
//
// A lease is a reservation (Request.Reserve) whose cost the store chooses:
// the units are consumed at grant time exactly as an admitted check of that
// cost would consume them, all-or-nothing across the limits, so the units
// admitted by every holder together never exceed any limit. ReturnLease
// settles it at what was used (granted minus unused), within its TTL. A
// lease never returned expires at its TTL: its units stay consumed, and the
// store only forgets its record. Since a lease is a hold, its ID is a hold
// id; end it with ReturnLease, or renew it (LeaseRequest.Renew): its
// return and the next grant in one atomic step.
//
// Lease returns an error wrapping ErrInvalid for a malformed request (see
// LeaseRequest.Validate) and one wrapping ErrStoreUnavailable when the
// store cannot be reached. ReturnLease returns an error wrapping ErrInvalid
// for a malformed return, or one that gives back more units than the lease
// granted (then nothing changes); an expired, finished or unknown lease is
// a status, not an error. A renew that gives back too much is refused the
// same way, and grants nothing.
type Leaser interface {
	Holder
	Lease(ctx context.Context, req LeaseRequest) (LeaseGrant, error)
	ReturnLease(ctx context.Context, ret LeaseReturn) (LeaseReturnResult, error)
}

// Validate reports what is wrong with r, in a sentence.
func (r LeaseRequest) Validate() error {
	for _, l := range r.Limits {
		if l.Algorithm == AlgorithmConcurrency {
			return invalidf("limit %q is a concurrency limit, which never leases: only token buckets and windows do", l.Name)
		}
	}
	if !validLimitName(r.Holder) {
		return invalidf("lease holder %q must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", truncate(r.Holder, 64))
	}
	if r.Want < 1 || r.Want > MaxLeaseWant {
		return invalidf("a lease wants 1 to %d units, got %d", MaxLeaseWant, r.Want)
	}
	if err := Limits(r.Limits).Validate(); err != nil {
		return err
	}
	for _, l := range r.Limits {
		if r.Want > l.Capacity {
			return invalidf("a lease wants %d units, more than limit %q ever holds (%d)", r.Want, l.Name, l.Capacity)
		}
	}
	// The rest (the subject's size) as for the reservation a lease is.
	if err := r.Check(r.Want).Validate(); err != nil {
		return err
	}
	if err := validateHoldTTL(r.TTL); err != nil {
		return invalidf("lease %s", err)
	}
	if r.Renew != "" {
		if err := (LeaseReturn{ID: r.Renew, Unused: r.RenewUnused}).Validate(); err != nil {
			return err
		}
		// The old lease's record must sit beside the new one's counters
		// (one shard, one Cluster slot) for one atomic call to end it.
		tag, _, _ := SplitHoldID(r.Renew)
		var buf [SubjectTagLen]byte
		if string(AppendSubjectTag(buf[:0], r.Tenant, r.Rule, r.Subject)) != tag {
			return invalidf("lease %q renewed is not of this tenant, rule and subject", truncate(r.Renew, 64))
		}
	} else if r.RenewUnused != 0 {
		return invalidf("a lease gives back %d unused units of no lease: name the lease renewed", r.RenewUnused)
	}
	return nil
}

// Check is the reservation a lease of cost units is: what a store checks
// and takes when it grants them.
func (r LeaseRequest) Check(cost int64) Request {
	return Request{Tenant: r.Tenant, Rule: r.Rule, Subject: r.Subject, Limits: r.Limits, Cost: cost,
		Reserve: true, HoldTTL: r.TTL, Now: r.Now}
}

// LeaseShare is the grant of a holder that wants want units when the
// limits have left units left and the live demands of every holder,
// want included, sum to demand (see LeaseGrant). It returns 1 when nothing
// is left: the cost of the check whose deny the call then answers.
func LeaseShare(left, want, demand int64) int64 {
	switch {
	case left <= 0:
		return 1
	case demand <= left:
		return min(want, left)
	}
	return min(want, left, max(1, left*want/demand))
}

// Validate reports what is wrong with ret, in a sentence.
func (ret LeaseReturn) Validate() error {
	if _, _, err := SplitHoldID(ret.ID); err != nil {
		return invalidf("lease id %q is malformed: want the id a lease grant returned", truncate(ret.ID, 64))
	}
	if ret.Unused < 0 {
		return invalidf("a lease return gives back 0 or more unused units, got %d", ret.Unused)
	}
	if ret.Unused > MaxLeaseWant {
		return invalidf("a lease return gives back at most the %d units a lease can grant, got %d", MaxLeaseWant, ret.Unused)
	}
	return nil
}

// ReturnTooLarge is the error of a return that gives back more units than
// its lease granted.
func ReturnTooLarge(unused, granted int64) error {
	return invalidf("a lease return gives back %d unused units, more than the %d the lease granted", unused, granted)
}

// DemandKey is the store key of a subject's lease demands: beside its
// counters, under the same hash tag.
func DemandKey(prefix, tag string) string {
	return prefix + "{" + tag + "}:demand"
}
