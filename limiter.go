package sluice

import (
	"context"
	"fmt"
	"time"
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
//	decision, err = limiter.Wait(ctx, userID) // or block until allowed
//
// Limits may also be given per call, when they depend on the caller (a
// plan, a customer's contract): AllowWith checks the limits it is given
// under the limiter's name, and a Limiter made with no limits of its own
// serves only such calls.
//
//	plans, err := sluice.NewLimiter(store, "api")
//	decision, err := plans.AllowWith(ctx, userID, 1, sluice.PerMinute(planLimit))
type Limiter struct {
	store  Store
	name   string
	limits []Limit
}

// NewLimiter returns a Limiter named name over store. The name namespaces the
// counters: two Limiters with different names never share them. With no
// limits, the Limiter checks only limits given per call (AllowWith); its
// Allow, AllowN, Peek, Wait and Reset then say so in an error.
func NewLimiter(store Store, name string, limits ...Limit) (*Limiter, error) {
	if store == nil {
		return nil, invalidf("a limiter needs a store; use memory.New() or redis.New(...)")
	}
	if name == "" {
		return nil, invalidf("a limiter needs a name to keep its counters apart from other limiters'")
	}
	if len(limits) > 0 {
		if err := Limits(limits).Validate(); err != nil {
			return nil, fmt.Errorf("limiter %q: %w", name, err)
		}
	}
	return &Limiter{store: store, name: name, limits: append([]Limit(nil), limits...)}, nil
}

// own returns l's own limits, or an error saying a limiter made without
// them takes its limits per call.
func (l *Limiter) own() ([]Limit, error) {
	if len(l.limits) == 0 {
		return nil, invalidf("limiter %q has no limits of its own: give them per call with AllowWith, or to NewLimiter", l.name)
	}
	return l.limits, nil
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
	limits, err := l.own()
	if err != nil {
		return Decision{}, err
	}
	return l.store.Check(ctx, Request{Rule: l.name, Subject: subject, Limits: limits, Cost: n})
}

// AllowWith is AllowN against the limits given instead of l's own, for
// limits chosen per call. Counters are the limiter's, per limit name, as
// for a changed limit: a limit keeps its counters across calls while its
// name, algorithm and window stay the same, so a subject moved to a higher
// plan keeps what it used. The limits are validated on every call; bad
// ones are an error wrapping ErrInvalid.
func (l *Limiter) AllowWith(ctx context.Context, subject string, n int64, limits ...Limit) (Decision, error) {
	if err := Limits(limits).Validate(); err != nil {
		return Decision{}, fmt.Errorf("limiter %q: %w", l.name, err)
	}
	return l.store.Check(ctx, Request{Rule: l.name, Subject: subject, Limits: limits, Cost: n})
}

// Peek reports the state of subject's limits without consuming anything.
func (l *Limiter) Peek(ctx context.Context, subject string) (Decision, error) {
	return l.AllowN(ctx, subject, 0)
}

// Reset forgets subject's counters.
func (l *Limiter) Reset(ctx context.Context, subject string) error {
	limits, err := l.own()
	if err != nil {
		return err
	}
	return l.store.Reset(ctx, "", l.name, subject, limits)
}

// ResetWith forgets subject's counters of the limits given, for a limiter
// whose limits are given per call.
func (l *Limiter) ResetWith(ctx context.Context, subject string, limits ...Limit) error {
	if err := Limits(limits).Validate(); err != nil {
		return fmt.Errorf("limiter %q: %w", l.name, err)
	}
	return l.store.Reset(ctx, "", l.name, subject, limits)
}

// Limits returns the limits l checks.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), l.limits...) }

// Wait blocks until one request from subject may go through, and takes it:
// WaitN(ctx, subject, 1).
func (l *Limiter) Wait(ctx context.Context, subject string) (Decision, error) {
	return l.WaitN(ctx, subject, 1)
}

// WaitN blocks until a request of cost n from subject may go through, and
// takes n units from every limit then. Each deny's RetryAfter is exact (the
// earliest time the same request would be allowed with no other traffic), so
// WaitN sleeps that long and asks again; other subjects' traffic on shared
// limits can make it ask more than twice. It returns ctx's error, without
// taking anything, when ctx ends first, or at once when the wait would
// outlast ctx's deadline. A cost that can never fit is an error wrapping
// ErrInvalid at once, as for AllowN; so is a store error.
func (l *Limiter) WaitN(ctx context.Context, subject string, n int64) (Decision, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d, err := l.AllowN(ctx, subject, n)
		if err != nil || d.Allowed {
			return d, err
		}
		wait := max(d.RetryAfter, time.Millisecond)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return d, fmt.Errorf("limiter %q: waiting %v for subject %q would outlast the context's deadline: %w", l.name, wait, subject, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-timer.C:
		}
	}
}
