// Package middleware rate-limits any net/http handler with Sluice.
//
//	limit, err := middleware.New(middleware.Options{
//		Store:  memory.New(memory.Options{}), // or a Redis store shared by every instance
//		Name:   "api",
//		Limits: []sluice.Limit{sluice.TokenBucket(20, 10).Named("burst")},
//		Key:    middleware.ClientIP(middleware.TrustedProxies{}),
//	})
//	http.ListenAndServe(":8080", limit(mux))
//
// Each request is counted under a key (the client IP by default; a header, a
// JWT claim or any function, alone or composed). Allowed requests reach the
// next handler with the rate-limit headers set (IETF RateLimit-Policy and
// RateLimit, X-RateLimit-Limit, -Remaining and -Reset); denied ones get 429
// with an exact Retry-After (seconds, rounded up) and an RFC 9457
// application/problem+json body.
//
// Checks go through a check engine (package check), as on every face of
// Sluice: a deny cache, a per-call deadline and a circuit breaker (so a dead
// Redis costs each request at most the deadline, then nothing), metrics.
// While the store is unavailable the failure mode decides: open (the default
// here) lets requests through, closed answers 503, local limits each instance
// on its own.
//
// A request whose key is empty (say, X-API-Key is missing) is counted in one
// bucket shared by every such request, so leaving the header out is no way
// around the limit; set RejectEmptyKey to answer 400 instead.
package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/client"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// Options configure the middleware. Store or Client is required; with Store,
// Name and Limits are too.
type Options struct {
	// Store holds the counters: memory.New for one instance, a Redis store
	// for many.
	Store sluice.Store
	// Client asks a remote Sluice service instead of a Store: the service's
	// rule for the route decides, and Limits are only used by FailLocal.
	Client *client.Client
	// Route gives the route sent to the remote service (default: the
	// request's path). Only used with Client.
	Route func(r *http.Request) string
	// RemoteLease, with Client, decides requests of cost 1 in this process
	// from units leased from the service (POST /v1/leases), one lease per
	// route and subject, so there is no call per request while units are
	// in hand; never more are admitted than the service granted. The
	// service's rule must lease (every limit "lease": "auto"); for one that
	// does not, requests are checked as without it. A key idle for 250ms,
	// and every key on Close, gives its unused units back. Route decides
	// how keys are grouped: give one route per rule (not the raw path), or
	// each path leases apart.
	RemoteLease *client.LeaseOptions

	// Name is the rule name: it namespaces the counters, names the policy in
	// the RateLimit headers, and labels metrics.
	Name string
	// Tenant further namespaces the counters, for several applications
	// sharing one store.
	Tenant string
	// Limits are checked together: a request passes only if every limit
	// allows it.
	Limits []sluice.Limit

	// Plans are named limit sets a request may be put on instead of Limits
	// (Store only), and Plan picks a request's plan by name: a header, a
	// JWT claim (JWTClaim), any KeyFunc. "" is Limits; a name Plans lacks
	// is answered 400. Limits keep their counters across plans by name,
	// algorithm and window, so a subject that upgrades keeps what it spent.
	Plans sluice.Plans
	Plan  KeyFunc

	// Key picks the key a request is counted under. Default:
	// ClientIP(TrustedProxies{}), the peer address.
	Key KeyFunc
	// RejectEmptyKey answers 400 to a request whose key is empty, instead of
	// counting all such requests in one shared bucket.
	RejectEmptyKey bool
	// Cost gives a request's cost (default 1). A cost of 0 only reads the
	// limits; a negative cost or one larger than a limit can ever hold is
	// answered 400.
	Cost func(r *http.Request) int64
	// Reserve makes Cost an estimate, corrected once the handler returned
	// with Settle's actual cost (see holds.go). A concurrency limit among
	// Limits holds a lease for the handler's run either way.
	Reserve bool
	// Settle, if set, gives the actual cost of a request that took a hold,
	// once its handler returned: from the response's size, or from a value
	// the handler reported with ReportCost. Without it a hold is released
	// (leases freed, the estimate stands). A panicking handler's hold is
	// always released.
	Settle func(r *http.Request, f Finished) int64

	// FailureMode applies while the store is unavailable (default
	// sluice.FailOpen).
	FailureMode sluice.FailureMode
	// Shadow checks and counts the limits but never denies: a request over
	// them (or denied by FailLocal's fallback) goes on, counted as
	// shadow_denied, with headers that ask nobody to wait. With Client the
	// remote rule's own shadow flag decides.
	Shadow bool
	// Engine, if set, is the check engine of Store, shared with other
	// limiters over the same store (one breaker and deny cache per store,
	// as the gateway does); Guard is then ignored. Default: an engine of
	// this Limiter's own.
	Engine *check.Engine
	// Guard configures the store deadline and circuit breaker of the
	// Limiter's own engine.
	Guard guard.Options

	// DenyHandler writes the response to a denied request. The rate-limit
	// headers, Retry-After included, are already set. Default: WriteProblem
	// with 429.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d sluice.Decision)
	// Metrics, if set, counts decisions under source "middleware".
	Metrics *metrics.Metrics
	// Source is the metrics source label (default "middleware"; the gateway
	// passes "gateway").
	Source string
	// Logger reports misconfiguration found while serving, such as a remote
	// service refusing Client's API key (default slog.Default()).
	Logger *slog.Logger
}

// Limiter is the middleware's engine; most users want New. The gateway and
// other handlers that need the decision itself call Check.
type Limiter struct {
	opts      Options
	engine    *check.Engine
	ownEngine bool
	rule      *check.Rule
	// remoteLeases, with Options.RemoteLease, are returned on Close.
	remoteLeases *remoteLeases
}

// New returns the middleware. Its counters live in opts.Store or the remote
// service; the guard it creates lives as long as the process.
func New(opts Options) (func(http.Handler) http.Handler, error) {
	l, err := NewLimiter(opts)
	if err != nil {
		return nil, err
	}
	return l.Handler, nil
}

// NewLimiter checks opts and returns a Limiter. Close releases its guard's
// fallback store.
func NewLimiter(opts Options) (*Limiter, error) {
	if (opts.Store == nil) == (opts.Client == nil) {
		return nil, errors.New("rate-limit middleware: set exactly one of Store (counters kept here) and Client (a remote Sluice service)")
	}
	if opts.FailureMode == "" {
		opts.FailureMode = sluice.FailOpen
	}
	if !opts.FailureMode.Valid() {
		return nil, fmt.Errorf("rate-limit middleware: failure mode %q is not one of open, closed, local", opts.FailureMode)
	}
	if opts.Store != nil {
		if opts.Name == "" {
			return nil, errors.New("rate-limit middleware: Name is required; it keeps these counters apart from other limiters' and names the policy in headers")
		}
		if err := sluice.Limits(opts.Limits).Validate(); err != nil {
			return nil, fmt.Errorf("rate-limit middleware %q: %w", opts.Name, err)
		}
		if err := opts.Plans.Validate(); err != nil {
			return nil, fmt.Errorf("rate-limit middleware %q: %w", opts.Name, err)
		}
		if opts.Plan != nil && len(opts.Plans) == 0 {
			return nil, fmt.Errorf("rate-limit middleware %q: Plan picks one of Plans, and there are none", opts.Name)
		}
	} else if opts.Plan != nil || len(opts.Plans) > 0 {
		// The remote service's rule holds the plans; its check API would
		// need the plan name, which the client does not send yet.
		return nil, errors.New("rate-limit middleware: Plans and Plan are for a Store; with Client the remote rule's plans are not chosen from here yet")
	} else if len(opts.Limits) > 0 || opts.FailureMode == sluice.FailLocal {
		if opts.FailureMode == sluice.FailLocal && len(opts.Limits) == 0 {
			return nil, errors.New("rate-limit middleware: failure mode local needs Limits to enforce in process while the service is unreachable")
		}
		if err := sluice.Limits(opts.Limits).Validate(); err != nil {
			return nil, fmt.Errorf("rate-limit middleware: local fallback limits: %w", err)
		}
	}
	if opts.Key == nil {
		opts.Key = ClientIP(TrustedProxies{})
	}
	if opts.Route == nil {
		opts.Route = func(r *http.Request) string { return r.URL.Path }
	}
	if opts.DenyHandler == nil {
		opts.DenyHandler = denyWithProblem
	}
	if opts.Source == "" {
		opts.Source = metrics.SourceMiddleware
	}
	opts.Limits = append([]sluice.Limit(nil), opts.Limits...)
	l := &Limiter{opts: opts, engine: opts.Engine}
	if opts.Engine != nil && opts.Client != nil {
		return nil, errors.New("rate-limit middleware: Engine is for a Store; a Client gets an engine of its own")
	}
	if l.engine == nil {
		eopts := check.Options{Guard: opts.Guard, Metrics: opts.Metrics}
		if eopts.Guard.Name == "" && opts.Name != "" {
			eopts.Guard.Name = opts.Name
		}
		var store sluice.Store = opts.Store
		if opts.Client != nil {
			logger := opts.Logger
			if logger == nil {
				logger = slog.Default()
			}
			rs := &remoteStore{c: opts.Client, log: logger}
			if opts.RemoteLease != nil {
				rs.leases = newRemoteLeases(opts.Client, *opts.RemoteLease)
				l.remoteLeases = rs.leases
			}
			store = rs
			if eopts.Guard.Timeout == 0 {
				eopts.Guard.Timeout = remoteTimeout
			}
			// The service's counters are reset through its admin API,
			// which this process never hears of: no deny cache.
			eopts.DenyCacheSize = -1
		}
		l.engine, l.ownEngine = check.New(store, eopts), true
	}
	name := opts.Name
	if name == "" {
		name = "remote"
	}
	l.rule = l.engine.NewRule(metrics.Labels{Source: opts.Source, Rule: opts.Name},
		check.Rule{Namespace: opts.Tenant, Name: name, Limits: opts.Limits, Plans: opts.Plans, Mode: opts.FailureMode, Shadow: opts.Shadow})
	return l, nil
}

// Close gives back remote mode's leased units (Options.RemoteLease) and
// releases the Limiter's own engine's in-process fallback store, if one
// was made. A shared Engine is its owner's to close.
func (l *Limiter) Close() error {
	if l.remoteLeases != nil {
		l.remoteLeases.close()
	}
	if l.ownEngine {
		return l.engine.Close()
	}
	return nil
}

// Handler rate-limits next.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, hold := l.serve(w, r)
		switch {
		case !ok:
		case hold != nil:
			l.serveHeld(w, r, next, hold)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// Serve decides r, writes the rate-limit headers on w, and reports whether
// the request may go on. When it returns false it has answered the request
// (429, 400 or 503). A hold the check took (a concurrency limit's lease, a
// reservation) is released at once, since Serve cannot know when the request
// ends: limiters with holds are used through Handler.
func (l *Limiter) Serve(w http.ResponseWriter, r *http.Request) bool {
	ok, hold := l.serve(w, r)
	if hold != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), holdTimeout)
		defer cancel()
		_, _ = l.engine.Hold(ctx, metrics.Labels{Source: l.opts.Source, Rule: l.opts.Name},
			sluice.HoldOp{Tenant: l.opts.Tenant, ID: hold.ID, Action: sluice.HoldRelease})
	}
	return ok
}

// serve is Serve, returning the hold the check took, if any.
func (l *Limiter) serve(w http.ResponseWriter, r *http.Request) (bool, *sluice.Hold) {
	start := time.Now()
	key := l.opts.Key(r)
	if key == "" && l.opts.RejectEmptyKey {
		l.engine.Refused(l.rule, start)
		WriteProblem(w, http.StatusBadRequest, "The request carries no rate-limit key (for example a required header is missing), so it cannot be counted.", 0)
		return false, nil
	}
	cost := int64(1)
	if l.opts.Cost != nil {
		cost = l.opts.Cost(r)
	}
	out, err := l.check(r, key, cost, start)
	if err != nil {
		switch {
		case errors.Is(err, sluice.ErrInvalid):
			WriteProblem(w, http.StatusBadRequest, err.Error(), 0)
		case r.Context().Err() != nil:
			// The client is gone; nobody reads the answer.
			w.WriteHeader(http.StatusServiceUnavailable)
		case errors.Is(err, check.ErrOverloaded):
			w.Header().Set("Retry-After", "1")
			WriteProblem(w, http.StatusServiceUnavailable, "The rate limiter is past its capacity and sheds requests; retry shortly.", time.Second)
		default:
			w.Header().Set("Retry-After", "1")
			WriteProblem(w, http.StatusServiceUnavailable, "The rate limiter cannot reach its store and fails closed; retry shortly.", 0)
		}
		return false, nil
	}
	if out.noRule {
		return true, nil
	}
	if out.header != nil {
		for name, values := range out.header {
			w.Header()[name] = values
		}
	} else {
		ratelimitheader.Set(w.Header(), l.opts.Name, out.res.Decision)
	}
	if out.res.Decision.Allowed || out.shadow {
		return true, out.res.Decision.Hold
	}
	l.opts.DenyHandler(w, r, out.res.Decision)
	return false, nil
}

type outcome struct {
	res    check.Result
	noRule bool
	shadow bool
	header http.Header // the remote service's rate-limit headers
}

func (l *Limiter) check(r *http.Request, key string, cost int64, start time.Time) (outcome, error) {
	q := check.Query{Rule: l.rule, Subject: key, Cost: cost, Reserve: l.opts.Reserve, Start: start}
	if l.opts.Plan != nil {
		q.Plan = l.opts.Plan(r)
	}
	if l.opts.Client == nil {
		res, err := l.engine.Check(r.Context(), q)
		return outcome{res: res}, err
	}
	call := &remoteCall{route: l.opts.Route(r)}
	res, err := l.engine.Check(withRemoteCall(r.Context(), call), q)
	if err != nil {
		return outcome{}, err
	}
	if res.Outcome == check.Degraded || !call.answered {
		// The failure mode answered: no remote rule speaks for the
		// decision, so the headers are this Limiter's.
		return outcome{res: res}, nil
	}
	if call.answer.Rule == "" {
		return outcome{noRule: true}, nil
	}
	return outcome{res: res, shadow: call.answer.Shadow, header: call.answer.Header}, nil
}

// denyWithProblem is the default DenyHandler.
func denyWithProblem(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
	WriteProblem(w, http.StatusTooManyRequests,
		fmt.Sprintf("Rate limit exceeded: retry after %s.", d.RetryAfter.Round(time.Millisecond)), d.RetryAfter)
}
