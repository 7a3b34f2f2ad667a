// Package checkapi holds the wire types of Sluice's HTTP check API, POST
// /v1/check: the Request a client sends, the Decision the service answers
// with 200 or 429, and the ErrorBody of every other answer. The service
// (package httpapi), the Go client (package client) and the load generator
// (package bench) all encode and decode these types, so the three cannot
// drift apart; the contract itself is docs/service.md and httpapi's OpenAPI
// document.
//
// Times on the wire are whole milliseconds, rounded up from the store's
// durations so that a client waiting them is never early.
package checkapi

import (
	"time"

	"github.com/sluicelabs/sluice"
)

// Request is the body of POST /v1/check.
type Request struct {
	// Route is the path of the request being checked; it selects the rule.
	Route string `json:"route"`
	// Subject is who is limited; "" (absent) is one subject shared by all.
	Subject string `json:"subject,omitempty"`
	// Cost is the units to take; nil (absent) means 1, and 0 peeks. A
	// pointer, because absent and 0 mean different things.
	Cost *int64 `json:"cost,omitempty"`
	// Reserve asks for the cost to be held as an estimate, to settle later;
	// false (absent) takes it for good.
	Reserve bool `json:"reserve,omitempty"`
	// Plan names one of the rule's plans; "" (absent) checks the rule's
	// own limits. An unknown plan is 400 invalid_request.
	Plan string `json:"plan,omitempty"`
}

// CostOrDefault is the cost the request asks for: 1 when it names none.
func (r Request) CostOrDefault() int64 {
	if r.Cost == nil {
		return 1
	}
	return *r.Cost
}

// Decision is the body of a check's 200 or 429 answer. Every field but Hold
// is always written: a zero is a figure ("0 remaining"), not an absence. (The
// yaml tags let the command line print an answer as YAML under the same
// names.)
type Decision struct {
	Allowed bool `json:"allowed" yaml:"allowed"`
	// Rule names the matched rule; null when none matched (the check is
	// then allowed and nothing is counted).
	Rule *string `json:"rule" yaml:"rule"`
	// The top-level figures are those of the most restrictive limit.
	Limit        int64 `json:"limit" yaml:"limit"`
	Remaining    int64 `json:"remaining" yaml:"remaining"`
	ResetAfterMs int64 `json:"reset_after_ms" yaml:"reset_after_ms"`
	RetryAfterMs int64 `json:"retry_after_ms" yaml:"retry_after_ms"`
	// Degraded: the store could not answer and the rule's failure mode
	// decided.
	Degraded bool `json:"degraded" yaml:"degraded"`
	// Shadow: the rule only observes, so Allowed is always true; the
	// figures still say what it would have decided.
	Shadow bool            `json:"shadow" yaml:"shadow"`
	Limits []LimitDecision `json:"limits" yaml:"limits"`
	// Plan names the plan whose limits were checked, and Override the
	// override that replaced them; each is absent when none applied.
	Plan     string `json:"plan,omitempty" yaml:"plan,omitempty"`
	Override string `json:"override,omitempty" yaml:"override,omitempty"`
	// Hold is present when the check took something returnable (a
	// reservation or a concurrency lease), and absent otherwise.
	Hold *Hold `json:"hold,omitempty" yaml:"hold,omitempty"`
}

// LimitDecision is one limit's part of a Decision. It carries no "allowed":
// a limit denied exactly when its RetryAfterMs is above zero, since an
// allowing limit has nothing to wait for and a denying one's wait, rounded
// up, is at least 1 ms.
type LimitDecision struct {
	Name         string           `json:"name" yaml:"name"`
	Algorithm    sluice.Algorithm `json:"algorithm" yaml:"algorithm"`
	Limit        int64            `json:"limit" yaml:"limit"`
	Remaining    int64            `json:"remaining" yaml:"remaining"`
	ResetAfterMs int64            `json:"reset_after_ms" yaml:"reset_after_ms"`
	RetryAfterMs int64            `json:"retry_after_ms" yaml:"retry_after_ms"`
}

// Hold names what a check holds until it is settled, released or expires.
type Hold struct {
	ID          string `json:"id" yaml:"id"`
	ExpiresInMs int64  `json:"expires_in_ms" yaml:"expires_in_ms"`
}

// ErrorBody is the body of every error answer:
// {"error": {"code": "snake_case_code", "message": "human sentence"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error's machine code and its explanation for a person.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfterMs, on a 429 rate_limited answer of the admin API only, is
	// the exact wait before the same call would be allowed.
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
}

// NewDecision is the answer d (the check engine's Result.Decision, in which
// a shadow rule's deny is already an allow) to a check of the named rule (""
// when no rule matched); shadow says the rule only observes. Set Plan and
// Override from the engine's Result.
func NewDecision(rule string, d sluice.Decision, shadow bool) Decision {
	b := Decision{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		ResetAfterMs: sluice.CeilMilliseconds(d.ResetAfter),
		RetryAfterMs: sluice.CeilMilliseconds(d.RetryAfter),
		Degraded:     d.Degraded,
		Shadow:       shadow,
		Limits:       make([]LimitDecision, 0, len(d.Limits)),
	}
	if rule != "" {
		b.Rule = &rule
	}
	if d.Hold != nil {
		b.Hold = &Hold{ID: d.Hold.ID, ExpiresInMs: d.Hold.ExpiresIn.Milliseconds()}
	}
	for _, ld := range d.Limits {
		b.Limits = append(b.Limits, LimitDecision{
			Name:         ld.Name,
			Algorithm:    ld.Algorithm,
			Limit:        ld.Limit,
			Remaining:    ld.Remaining,
			ResetAfterMs: sluice.CeilMilliseconds(ld.ResetAfter),
			RetryAfterMs: sluice.CeilMilliseconds(ld.RetryAfter),
		})
	}
	return b
}

// RuleName is the matched rule's name, or "" when none matched.
func (d Decision) RuleName() string {
	if d.Rule == nil {
		return ""
	}
	return *d.Rule
}

// StoreDecision is d as a sluice.Decision: every figure the wire carries,
// each limit's Allowed told by its wait (see LimitDecision), and Binding. A
// limit's Window is not on the wire and stays zero.
func (d Decision) StoreDecision() sluice.Decision {
	out := sluice.Decision{
		Allowed:    d.Allowed,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		ResetAfter: milliseconds(d.ResetAfterMs),
		RetryAfter: milliseconds(d.RetryAfterMs),
		Degraded:   d.Degraded,
	}
	if len(d.Limits) > 0 {
		out.Limits = make([]sluice.LimitDecision, 0, len(d.Limits))
	}
	for _, l := range d.Limits {
		out.Limits = append(out.Limits, sluice.LimitDecision{
			Name:       l.Name,
			Algorithm:  l.Algorithm,
			Allowed:    l.RetryAfterMs == 0,
			Limit:      l.Limit,
			Remaining:  l.Remaining,
			ResetAfter: milliseconds(l.ResetAfterMs),
			RetryAfter: milliseconds(l.RetryAfterMs),
		})
	}
	// The binding limit is not on the wire: it is chosen as Combine chose
	// it, from the figures sent.
	combined := out
	combined.Combine()
	out.Binding = combined.Binding
	if d.Hold != nil {
		out.Hold = &sluice.Hold{ID: d.Hold.ID, ExpiresIn: milliseconds(d.Hold.ExpiresInMs)}
	}
	return out
}

func milliseconds(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
