package middleware

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// remoteTimeout is the default deadline of a call to a remote service: a
// network round trip plus the service's own store call.
const remoteTimeout = 250 * time.Millisecond

// remoteStore is the store of remote mode's engine: a Sluice service asked
// over its check API, whose rule for the route decides. It is a store like
// any other to the engine, so its guard's deadline, breaker and failure
// policy protect the service's checks as they protect Redis's, through the
// one entry point every check takes.
//
// Two things of a check do not fit a sluice.Request, and travel with the
// check's context instead (see remoteCall): the route, which picks the
// service's rule, and what the service answers besides a decision (the
// rule's name, its shadow flag, its headers). The Request's Tenant, Rule and
// Limits are not sent: the API key names the tenant, the route the rule,
// and Limits are the failure mode local's own, for while the service cannot
// answer.
type remoteStore struct {
	c   *client.Client
	log *slog.Logger
	// leases, when set, decides checks of cost 1 from leased units.
	leases *remoteLeases
	// lastRefusal is when a refused key was last logged (unix ns).
	lastRefusal atomic.Int64
}

var (
	_ sluice.Store  = (*remoteStore)(nil)
	_ sluice.Holder = (*remoteStore)(nil)
)

// refusalLogInterval spaces the log lines about a refused API key: loud
// enough to be found, not one line per request.
const refusalLogInterval = 10 * time.Second

// remoteCall is one check's exchange with the service: the route asked
// about, and the service's answer once it gave one. The middleware puts it
// in the context of the check it sends through the engine; the guard passes
// the context's values on to the store's call.
type remoteCall struct {
	route    string
	answer   client.Result
	answered bool
}

type remoteCallKey struct{}

// withRemoteCall returns ctx carrying call to remoteStore.Check.
func withRemoteCall(ctx context.Context, call *remoteCall) context.Context {
	return context.WithValue(ctx, remoteCallKey{}, call)
}

// Check asks the service about the route of ctx's remoteCall, and records
// the whole answer there. A cost of 0 peeks, as on any store; its 400 is an
// input error (sluice.ErrInvalid) with the service's own sentence.
func (s *remoteStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	call, ok := ctx.Value(remoteCallKey{}).(*remoteCall)
	switch {
	case !ok:
		return sluice.Decision{}, &remoteUnsupported{"a check without a route (the service picks its rule by route; checks reach it through the middleware)"}
	case req.HoldTTL != 0:
		return sluice.Decision{}, &remoteUnsupported{"a hold TTL of the check's own (the check API takes none)"}
	case !req.Now.IsZero():
		return sluice.Decision{}, &remoteUnsupported{"a check at a given time (the service decides at its own)"}
	}
	if s.leases != nil && req.Cost == 1 && !req.Reserve {
		if e := s.leases.get(call.route, req.Subject); e != nil {
			res, leased, err := e.allow(ctx)
			if leased {
				return s.answer(call, res, err)
			}
		}
	}
	check := s.c.Check
	if req.Reserve {
		check = s.c.Reserve
	}
	res, err := check(ctx, call.route, req.Subject, req.Cost)
	return s.answer(call, res, err)
}

// answer records the service's answer to call, or says what its error
// means to the engine.
func (s *remoteStore) answer(call *remoteCall, res client.Result, err error) (sluice.Decision, error) {
	if err == nil {
		call.answer, call.answered = res, true
		return res.Decision, nil
	}
	var e *client.Error
	if errors.As(err, &e) && e.StatusCode == http.StatusBadRequest {
		return sluice.Decision{}, &remoteInvalid{e}
	}
	if errors.As(err, &e) && (e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden) {
		// Every check will fail the same way until the key is fixed,
		// and the failure mode hides it from end users: say so.
		now, last := time.Now().UnixNano(), s.lastRefusal.Load()
		if now-last >= int64(refusalLogInterval) && s.lastRefusal.CompareAndSwap(last, now) {
			s.log.Error("the remote Sluice service refuses the rate-limit middleware's API key; every check fails and the failure mode applies",
				"status", e.StatusCode, "code", e.Code, "message", e.Message)
		}
	}
	return sluice.Decision{}, err
}

// Reset is not offered by the check API: a remote service's counters are
// reset through its admin API, with an operator's or admin key.
func (s *remoteStore) Reset(context.Context, string, string, string, []sluice.Limit) error {
	return &remoteUnsupported{"resetting counters (use the service's admin API: DELETE /v1/tenants/{tenant}/rules/{rule}/subjects/{subject})"}
}

// remoteUnsupported is what the check API cannot carry. It is input the
// store refuses, not a store failure: it wraps sluice.ErrInvalid, so the
// guard neither counts it against the breaker nor answers it by the failure
// mode, and errors.ErrUnsupported.
type remoteUnsupported struct{ what string }

func (e *remoteUnsupported) Error() string {
	return "a remote Sluice service cannot do this through its check API: " + e.what
}
func (e *remoteUnsupported) Unwrap() []error {
	return []error{sluice.ErrInvalid, errors.ErrUnsupported}
}

// remoteInvalid is the service's 400, shown with the service's own message.
type remoteInvalid struct{ e *client.Error }

func (r *remoteInvalid) Error() string { return r.e.Message }
func (r *remoteInvalid) Unwrap() error { return sluice.ErrInvalid }
