package sluice

import (
	"fmt"
	"time"
)

// Decision is the answer to a check.
//
// Allowed says whether the request may go through. The top-level Limit,
// Remaining, ResetAfter and RetryAfter are those of the most restrictive limit:
// on a deny, the one that must wait longest; on an allow, the one with the least
// remaining. Limits holds every limit's own figures, in the order they were
// given.
type Decision struct {
	Allowed bool
	// Limit is the capacity of the most restrictive limit.
	Limit int64
	// Remaining is how many units are left after this request (before it, on a
	// deny, since a deny consumes nothing).
	Remaining int64
	// ResetAfter is how long until the limit holds no usage at all, if no other
	// request arrives.
	ResetAfter time.Duration
	// RetryAfter is zero when allowed. On a deny it is exact: the earliest
	// moment, counted from the check, at which the same request would be
	// allowed if no other traffic arrived.
	RetryAfter time.Duration
	// Degraded is set when the store could not answer and the decision came
	// from the failure policy (allowed when failing open, or from an
	// in-process fallback store).
	Degraded bool
	Limits   []LimitDecision
	// Binding is the index in Limits of the limit the top-level figures are
	// from, as Combine chose it: the one a client should be told about.
	Binding int
	// Hold is what the check took that can be given back (leases, a
	// reserved estimate), or nil; see holds.go.
	Hold *Hold
	// ExpiredLeases counts the leases, of holders that never released
	// them, that this check found expired and dropped (for metrics).
	ExpiredLeases int64
}

// LimitDecision is one limit's part of a Decision.
type LimitDecision struct {
	Name       string
	Algorithm  Algorithm
	Allowed    bool
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	// Window is the time the quota refers to: the window, or for a token
	// bucket the time an empty bucket takes to fill (see PolicyWindow).
	Window time.Duration
}

// String describes d for logs and test failures.
func (d Decision) String() string {
	verdict := "allowed"
	if !d.Allowed {
		verdict = "denied"
	}
	return fmt.Sprintf("%s (limit %d, remaining %d, reset after %v, retry after %v)",
		verdict, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter)
}

// Combine fills d's top-level figures, and Binding, from its per-limit
// decisions. Stores call it after filling Limits.
func (d *Decision) Combine() {
	d.Allowed = true
	for _, ld := range d.Limits {
		if !ld.Allowed {
			d.Allowed = false
		}
	}
	best := -1
	for i, ld := range d.Limits {
		if best < 0 {
			best = i
			continue
		}
		b := d.Limits[best]
		if d.Allowed {
			if ld.Remaining < b.Remaining || (ld.Remaining == b.Remaining && ld.ResetAfter > b.ResetAfter) {
				best = i
			}
		} else if ld.RetryAfter > b.RetryAfter || (ld.RetryAfter == b.RetryAfter && ld.Remaining < b.Remaining) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	d.Binding = best
	b := d.Limits[best]
	d.Limit, d.Remaining, d.ResetAfter = b.Limit, b.Remaining, b.ResetAfter
	d.RetryAfter = 0
	if !d.Allowed {
		// Every limit must allow; each one's availability only grows with
		// time, so the whole request fits once the slowest limit does.
		for _, ld := range d.Limits {
			d.RetryAfter = max(d.RetryAfter, ld.RetryAfter)
		}
	}
}

// CeilMilliseconds rounds d up to whole milliseconds, so a client waiting
// that long is never early.
func CeilMilliseconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
