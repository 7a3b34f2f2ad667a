package sluice

import (
	"context"
	"fmt"
)

// Limiter checks a fixed set of limits for any number of subjects (users, API
// keys, IP addresses) against a Store. It is safe for concurrent use, and any
// number of Limiters in any number of processes that share a Store and a name
// share their counters.
//
//	limiter, err := sluice.NewLimiter(store, "api",
//		sluice.TokenBucket(20, 10).Named("burst"),
//		sluice.SlidingWindow(1000, time.Hour).Named("hourly"))
//	decision, err := limiter.Allow(ctx, userID)
//	if !decision.Allowed { /* wait decision.RetryAfter */ }
type Limiter struct {
	store  Store
	name   string
	limits []Limit
}

// NewLimiter returns a Limiter named name over store. The name namespaces the
// counters: two Limiters with different names never share them.
func NewLimiter(store Store, name string, limits ...Limit) (*Limiter, error) {
	if store == nil {
		return nil, invalidf("a limiter needs a store; use memory.New() or redis.New(...)")
	}
	if name == "" {
		return nil, invalidf("a limiter needs a name to keep its counters apart from other limiters'")
	}
	if err := Limits(limits).Validate(); err != nil {
		return nil, fmt.Errorf("limiter %q: %w", name, err)
	}
	return &Limiter{store: store, name: name, limits: append([]Limit(nil), limits...)}, nil
}

// Allow reports whether one request from subject may go through now, and takes
// it from every limit if so. It is AllowN(ctx, subject, 1).
func (l *Limiter) Allow(ctx context.Context, subject string) (Decision, error) {
	return l.AllowN(ctx, subject, 1)
}

// AllowN reports whether a request of cost n from subject may go through now,
// and takes n units from every limit if so. A cost larger than a limit can ever
// hold is an error wrapping ErrInvalid, not a deny.
func (l *Limiter) AllowN(ctx context.Context, subject string, n int64) (Decision, error) {
	return l.store.Check(ctx, Request{Rule: l.name, Subject: subject, Limits: l.limits, Cost: n})
}

// Peek reports the state of subject's limits without consuming anything.
func (l *Limiter) Peek(ctx context.Context, subject string) (Decision, error) {
	return l.AllowN(ctx, subject, 0)
}

// Reset forgets subject's counters.
func (l *Limiter) Reset(ctx context.Context, subject string) error {
	return l.store.Reset(ctx, "", l.name, subject, l.limits)
}

// Limits returns the limits l checks.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), l.limits...) }
