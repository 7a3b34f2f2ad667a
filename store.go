package sluice

import (
	"context"
	"time"
)

// Store holds rate-limit counters and decides checks atomically: for one
// Request it reads the state of every limit, decides, and writes, as one
// indivisible step, so concurrent checks from any number of processes never
// over-admit.
//
// Implementations: package memory (in process) and package redis.
type Store interface {
	// Check decides req. It returns an error wrapping ErrInvalid for a request
	// that can never be valid (see Request.Validate) and one wrapping
	// ErrStoreUnavailable when the store cannot be reached; it never returns a
	// Decision together with an error.
	Check(ctx context.Context, req Request) (Decision, error)
	// Reset forgets the counters of every given limit for the subject of
	// (tenant, rule), as if it had never been seen.
	Reset(ctx context.Context, tenant, rule, subject string, limits []Limit) error
}

// Request is one check: a cost against one or more limits for one subject of
// one rule of one tenant. Tenant and Rule namespace the counters; the library
// Limiter leaves Tenant empty and uses its own name as Rule.
type Request struct {
	Tenant  string
	Rule    string
	Subject string
	Limits  []Limit
	// Cost is how many units the request takes; 0 peeks without consuming.
	Cost int64
	// Reserve marks Cost as an estimate to settle later: an allowed check
	// returns a Hold (see holds.go). Checks with a concurrency limit take
	// one anyway.
	Reserve bool
	// HoldTTL, when set, is the TTL of the hold the check takes (default:
	// Request.HoldTTLOf).
	HoldTTL time.Duration
	// Now, when non-zero, is the time the check happens at. Only tests set it;
	// stores otherwise use their own clock (Redis: the server's TIME), so
	// instances with skewed clocks still agree.
	Now time.Time
}

// MaxSubjectBytes bounds a subject: keys are hashed, so this only bounds the
// work of hashing.
const MaxSubjectBytes = 64 << 10

// Validate reports what is wrong with r: invalid limits, a negative cost, or a
// cost larger than some limit can ever hold (which could never be allowed, so it
// is an input error rather than a deny).
func (r Request) Validate() error {
	if err := Limits(r.Limits).Validate(); err != nil {
		return err
	}
	if r.Cost < 0 {
		return invalidf("cost must not be negative, got %d", r.Cost)
	}
	for _, l := range r.Limits {
		if r.Cost > l.MaxCost() {
			return invalidf("cost %d can never fit limit %q, which holds at most %d", r.Cost, l.Name, l.MaxCost())
		}
	}
	if r.HoldTTL != 0 {
		if err := validateHoldTTL(r.HoldTTL); err != nil {
			return invalidf("hold %s", err)
		}
	}
	if len(r.Subject) > MaxSubjectBytes {
		return invalidf("subject is %d bytes, more than the %d allowed", len(r.Subject), MaxSubjectBytes)
	}
	return nil
}
