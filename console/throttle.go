package console

import (
	"context"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

// DefaultSignInFailures is how many failed sign-ins one client address may
// make per rolling minute when Options.SignInFailures is unset.
var DefaultSignInFailures = sluice.PerMinute(10).Named("failures")

// signInNamespace keys the throttle's counters apart from every tenant's
// (a tenant name is a slug, so it never contains ':').
const signInNamespace = "sluice:console"

// signInThrottle limits failed sign-ins per client address with the
// service's own check engine, so the limit holds across instances sharing a
// store. Each attempt reserves one failure before the secret is judged,
// which bounds concurrent guesses as exactly as sequential ones; a sign-in
// that succeeds settles its reservation at 0, so only failures count.
type signInThrottle struct {
	engine *check.Engine
	rule   *check.Rule // one value: the deny cache answers a throttled address in process
}

func newSignInThrottle(e *check.Engine, limit sluice.Limit) *signInThrottle {
	// FailLocal: with the store down, an in-process limit still stands in
	// front of the secrets, and sign-in still works.
	return &signInThrottle{engine: e,
		rule: &check.Rule{Namespace: signInNamespace, Name: "signin", Limits: []sluice.Limit{limit}, Mode: sluice.FailLocal}}
}

// holdTTL bounds a reservation whose request never finishes judging: it
// then stands as a failure.
const holdTTL = 30 * time.Second

// admit reserves a failure for client (an address). A decision that does
// not allow means the address is over its limit; it says until when.
func (t *signInThrottle) admit(ctx context.Context, client string) (sluice.Decision, error) {
	res, err := t.engine.Check(ctx, check.Query{Rule: t.rule, Subject: client, Cost: 1, Reserve: true, HoldTTL: holdTTL})
	return res.Decision, err
}

// succeeded gives the reserved failure back.
func (t *signInThrottle) succeeded(ctx context.Context, hold *sluice.Hold) {
	if hold == nil || hold.ID == "" {
		return
	}
	_, _ = t.engine.Hold(context.WithoutCancel(ctx), metrics.Labels{}, sluice.HoldOp{Tenant: signInNamespace, ID: hold.ID, Action: sluice.HoldSettle, Cost: 0})
}

// failed keeps the reserved failure, ending the hold now rather than at its TTL.
func (t *signInThrottle) failed(ctx context.Context, hold *sluice.Hold) {
	if hold == nil || hold.ID == "" {
		return
	}
	_, _ = t.engine.Hold(context.WithoutCancel(ctx), metrics.Labels{}, sluice.HoldOp{Tenant: signInNamespace, ID: hold.ID, Action: sluice.HoldRelease})
}
