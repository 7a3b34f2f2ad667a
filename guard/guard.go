// Package guard protects callers from a slow or dead rate-limit store.
//
// A Guard wraps a sluice.Store. Every store call gets its own deadline
// (Options.Timeout, 50ms by default), so a hung Redis costs a request at most
// that long. Calls go through a circuit breaker: after FailureThreshold
// consecutive failures the breaker opens and checks stop touching the store at
// all, answering from the failure policy at once; after OpenTimeout one probe
// call is let through, and its success closes the breaker again.
//
// When the store cannot answer, the sluice.FailureMode of the check decides:
//
//   - FailClosed: an error wrapping sluice.ErrStoreUnavailable (the service
//     answers 503);
//   - FailOpen: Decision{Allowed: true, Degraded: true};
//   - FailLocal: the decision of an in-process store, marked Degraded, so each
//     instance still enforces the limits on its own share of the traffic.
//
// Two kinds of error are not store failures and never count towards opening
// the breaker: input errors (sluice.ErrInvalid), which are returned as they
// are, and the caller's own context being cancelled or past its deadline,
// which is returned to the caller without applying any failure policy.
package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// ErrBreakerOpen is wrapped (together with sluice.ErrStoreUnavailable) by the
// error of a fail-closed check answered without calling the store because the
// circuit breaker is open.
var ErrBreakerOpen = errors.New("circuit breaker open after repeated store failures; the store is not being called")

// Defaults for the zero Options.
const (
	DefaultTimeout          = 50 * time.Millisecond
	DefaultFailureThreshold = 5
	DefaultOpenTimeout      = time.Second
	DefaultName             = "store"
)

// Options configure a Guard. The zero value is ready to use.
type Options struct {
	// Name names the breaker in OnStateChange and in the sluice_breaker_state
	// metric (default "store").
	Name string
	// Timeout bounds each store call (default 50ms).
	Timeout time.Duration
	// Local is the store used by FailLocal checks while the primary store is
	// unavailable. Default: an in-process memory store, created on first use
	// and closed by Close.
	Local sluice.Store
	// FailureThreshold is the number of consecutive store failures that opens
	// the breaker (default 5).
	FailureThreshold int
	// OpenTimeout is how long the breaker stays open before letting one probe
	// call through (default 1s).
	OpenTimeout time.Duration
	// OnStateChange, if set, is called when the breaker changes state, with
	// states "closed", "open" or "half-open". It runs while the breaker is
	// locked: it must be quick and must not call back into the Guard.
	OnStateChange func(name, from, to string)
	// Metrics, if set, records store call durations and errors and the
	// breaker state.
	Metrics *metrics.Metrics
}

// Guard is a sluice store wrapper with a per-call deadline, a circuit breaker
// and a failure policy. It is safe for concurrent use.
type Guard struct {
	primary sluice.Store
	timeout time.Duration
	breaker *gobreaker.CircuitBreaker[sluice.Decision]
	metrics *metrics.Metrics

	localOnce sync.Once
	local     sluice.Store
	ownLocal  *memory.Store // the default Local store, closed by Close
}

// New returns a Guard over primary.
func New(primary sluice.Store, opts Options) *Guard {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.FailureThreshold <= 0 {
		opts.FailureThreshold = DefaultFailureThreshold
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	g := &Guard{primary: primary, timeout: opts.Timeout, metrics: opts.Metrics, local: opts.Local}
	threshold := uint32(opts.FailureThreshold)
	onChange := opts.OnStateChange
	g.breaker = gobreaker.NewCircuitBreaker[sluice.Decision](gobreaker.Settings{
		Name:        opts.Name,
		MaxRequests: 1, // one probe at a time while half-open
		Timeout:     opts.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
		IsExcluded:  notStoreFailure,
		OnStateChange: func(name string, from, to gobreaker.State) {
			g.metrics.SetBreakerState(name, to.String())
			if onChange != nil {
				onChange(name, from.String(), to.String())
			}
		},
	})
	g.metrics.SetBreakerState(opts.Name, metrics.BreakerClosed)
	return g
}

// Check decides req on the primary store within the deadline, or, when the
// store fails or the breaker is open, by mode (see the package doc). An
// unknown or empty mode fails closed.
func (g *Guard) Check(ctx context.Context, req sluice.Request, mode sluice.FailureMode) (sluice.Decision, error) {
	d, err := g.breaker.Execute(func() (sluice.Decision, error) {
		return g.checkPrimary(ctx, req)
	})
	if err == nil {
		return d, nil
	}
	if errors.Is(err, sluice.ErrInvalid) {
		return sluice.Decision{}, err
	}
	var gone *callerGone
	if errors.As(err, &gone) {
		return sluice.Decision{}, gone.err
	}
	return g.fallback(ctx, req, mode, err)
}

func (g *Guard) checkPrimary(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	callCtx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	start := time.Now()
	d, err := g.primary.Check(callCtx, req)
	if err != nil {
		if errors.Is(err, sluice.ErrInvalid) {
			return d, err
		}
		if ctx.Err() != nil {
			return d, &callerGone{err: ctx.Err()}
		}
	}
	g.metrics.ObserveStore(time.Since(start), err)
	return d, err
}

// fallback answers req by mode after the store failed with cause.
func (g *Guard) fallback(ctx context.Context, req sluice.Request, mode sluice.FailureMode, cause error) (sluice.Decision, error) {
	// The store never saw an invalid request it could reject: reject it here,
	// so a store outage cannot turn bad input into an allow. A request without
	// limits is one for a remote service, which holds the limits itself.
	if len(req.Limits) > 0 || mode == sluice.FailLocal {
		if err := req.Validate(); err != nil {
			return sluice.Decision{}, err
		}
	}
	switch mode {
	case sluice.FailOpen:
		return sluice.Decision{Allowed: true, Degraded: true}, nil
	case sluice.FailLocal:
		d, err := g.localStore().Check(ctx, req)
		if err != nil {
			return sluice.Decision{}, err
		}
		d.Degraded = true
		return d, nil
	}
	return sluice.Decision{}, unavailable(cause)
}

func (g *Guard) localStore() sluice.Store {
	g.localOnce.Do(func() {
		if g.local == nil {
			g.ownLocal = memory.New(memory.Options{})
			g.local = g.ownLocal
		}
	})
	return g.local
}

// Reset forgets the subject's counters on the fallback store and on the
// primary store, the latter within the deadline and through the breaker:
// while the breaker is open it fails at once with an error wrapping
// sluice.ErrStoreUnavailable.
func (g *Guard) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	// The fallback store holds what the subject used during an outage:
	// forget that too, or a reset would not reset a fail-local rule.
	if err := g.localStore().Reset(ctx, tenant, rule, subject, limits); err != nil && errors.Is(err, sluice.ErrInvalid) {
		return err
	}
	_, err := g.breaker.Execute(func() (sluice.Decision, error) {
		callCtx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		start := time.Now()
		err := g.primary.Reset(callCtx, tenant, rule, subject, limits)
		if err != nil {
			if errors.Is(err, sluice.ErrInvalid) {
				return sluice.Decision{}, err
			}
			if ctx.Err() != nil {
				return sluice.Decision{}, &callerGone{err: ctx.Err()}
			}
		}
		g.metrics.ObserveStore(time.Since(start), err)
		return sluice.Decision{}, err
	})
	if err == nil || errors.Is(err, sluice.ErrInvalid) {
		return err
	}
	var gone *callerGone
	if errors.As(err, &gone) {
		return gone.err
	}
	return unavailable(err)
}

// State returns the breaker's state: "closed", "open" or "half-open".
func (g *Guard) State() string { return g.breaker.State().String() }

// Store returns a sluice.Store whose Check goes through g with the given
// failure mode, for code that takes a plain sluice.Store.
func (g *Guard) Store(mode sluice.FailureMode) sluice.Store { return modeStore{g: g, mode: mode} }

// Close releases the default Local store, if one was created. It does not
// close the primary store, which the caller owns.
func (g *Guard) Close() error {
	g.localOnce.Do(func() {}) // no local store may be created after Close
	if g.ownLocal != nil {
		return g.ownLocal.Close()
	}
	return nil
}

type modeStore struct {
	g    *Guard
	mode sluice.FailureMode
}

func (s modeStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	return s.g.Check(ctx, req, s.mode)
}

func (s modeStore) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	return s.g.Reset(ctx, tenant, rule, subject, limits)
}

// callerGone marks a store call abandoned because the caller's own context
// ended: not the store's fault.
type callerGone struct{ err error }

func (e *callerGone) Error() string { return e.err.Error() }
func (e *callerGone) Unwrap() error { return e.err }

func notStoreFailure(err error) bool {
	var gone *callerGone
	return errors.Is(err, sluice.ErrInvalid) || errors.As(err, &gone)
}

func unavailable(cause error) error {
	switch {
	case errors.Is(cause, gobreaker.ErrOpenState), errors.Is(cause, gobreaker.ErrTooManyRequests):
		return fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, ErrBreakerOpen)
	case errors.Is(cause, sluice.ErrStoreUnavailable):
		return cause
	}
	// %v, not %w: a store timeout must not look like the caller's own
	// context.DeadlineExceeded to errors.Is.
	return fmt.Errorf("%w: %v", sluice.ErrStoreUnavailable, cause)
}
