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

type remoteCallKey struct{}

// remoteCall carries what a check of a remote service needs beyond a
// sluice.Request (the route) and what it returns beyond a Decision (the rule
// and the service's headers), through the guard.
type remoteCall struct {
	route  string
	result *client.Result
}

// remoteStore adapts a client to sluice.Store so the guard's deadline,
// breaker and failure policy protect remote checks too.
type remoteStore struct {
	c   *client.Client
	log *slog.Logger
	// lastRefusal is when a refused key was last logged (unix ns).
	lastRefusal atomic.Int64
}

// refusalLogInterval spaces the log lines about a refused API key: loud
// enough to be found, not one line per request.
const refusalLogInterval = 10 * time.Second

func (s *remoteStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	call, _ := ctx.Value(remoteCallKey{}).(*remoteCall)
	if call == nil {
		return sluice.Decision{}, errors.New("remote check without a route")
	}
	check := s.c.Check
	if req.Reserve {
		check = s.c.Reserve
	}
	res, err := check(ctx, call.route, req.Subject, req.Cost)
	if err != nil {
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
	*call.result = res
	d := sluice.Decision{
		Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining,
		ResetAfter: res.ResetAfter, RetryAfter: res.RetryAfter, Degraded: res.Degraded, Hold: res.Hold,
	}
	for _, l := range res.Limits {
		d.Limits = append(d.Limits, sluice.LimitDecision{
			Name: l.Name, Algorithm: l.Algorithm, Allowed: l.RetryAfter == 0, Limit: l.Limit,
			Remaining: l.Remaining, ResetAfter: l.ResetAfter, RetryAfter: l.RetryAfter,
		})
	}
	return d, nil
}

func (*remoteStore) Reset(context.Context, string, string, string, []sluice.Limit) error {
	return errors.New("counters of a remote Sluice service are reset through its admin API")
}

// remoteInvalid is the service's 400, shown with the service's own message.
type remoteInvalid struct{ e *client.Error }

func (r *remoteInvalid) Error() string { return r.e.Message }
func (r *remoteInvalid) Unwrap() error { return sluice.ErrInvalid }
