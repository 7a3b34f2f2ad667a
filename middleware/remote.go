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

// remoteService is the remote mode's seam: a Sluice service asked about a
// route and a subject, whose rule decides. Each check reaches it as the
// engine query's Ask, so the guard's deadline, breaker and failure policy
// protect it as they protect a store.
type remoteService struct {
	c   *client.Client
	log *slog.Logger
	// lastRefusal is when a refused key was last logged (unix ns).
	lastRefusal atomic.Int64
}

// refusalLogInterval spaces the log lines about a refused API key: loud
// enough to be found, not one line per request.
const refusalLogInterval = 10 * time.Second

// check asks the service; its 400 is an input error (sluice.ErrInvalid)
// with the service's own sentence.
func (s *remoteService) check(ctx context.Context, route, subject string, cost int64, reserve bool) (client.Result, error) {
	check := s.c.Check
	if reserve {
		check = s.c.Reserve
	}
	res, err := check(ctx, route, subject, cost)
	if err == nil {
		return res, nil
	}
	var e *client.Error
	if errors.As(err, &e) && e.StatusCode == http.StatusBadRequest {
		return client.Result{}, &remoteInvalid{e}
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
	return client.Result{}, err
}

// remoteCounters is the store of a remote mode's engine: every check is
// asked of the service (check.Query.Ask), so no check ever reaches it; the
// holds a check took there are given back through it (Hold, in holds.go).
type remoteCounters struct{ s *remoteService }

func (remoteCounters) Check(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, errors.New("a remote Sluice service is asked about a route; this check named none")
}

func (remoteCounters) Reset(context.Context, string, string, string, []sluice.Limit) error {
	return errors.New("counters of a remote Sluice service are reset through its admin API")
}

// remoteInvalid is the service's 400, shown with the service's own message.
type remoteInvalid struct{ e *client.Error }

func (r *remoteInvalid) Error() string { return r.e.Message }
func (r *remoteInvalid) Unwrap() error { return sluice.ErrInvalid }
