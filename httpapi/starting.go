package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/checkapi"
)

// Backoff between start attempts on a dependency that does not answer yet
// (the catalog database): doubled after each failure, with jitter, up to the
// cap. Each attempt has its own deadline, so a database that hangs is
// retried too.
const (
	startMinBackoff     = 100 * time.Millisecond
	startMaxBackoff     = 5 * time.Second
	startAttemptTimeout = 10 * time.Second
	// startReminder is how often a wait that goes on is logged again.
	startReminder = time.Minute
)

// ErrStoppedStarting is what WaitFor returns when ctx ends while it waits
// for a dependency: a stop asked for, not a failure.
var ErrStoppedStarting = errors.New("stopped while starting")

// StartGate is the handler of a service's main listener, which listens from
// the start so that probes get an answer while the service waits for its
// dependencies: /healthz answers 200 (the process is up: a restart would not
// help) and every other path 503 "starting", /readyz included, saying what
// it waits for. Once the service is up, Open hands every request to next.
type StartGate struct {
	next    http.Handler
	open    atomic.Bool
	waiting atomic.Pointer[string]
}

// NewStartGate returns a closed gate in front of next.
func NewStartGate(next http.Handler) *StartGate { return &StartGate{next: next} }

// Open hands every request from now on to the service.
func (g *StartGate) Open() { g.open.Store(true) }

// ServeHTTP answers as the gate is: the service's answer once open.
func (g *StartGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.open.Load() {
		g.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
		return
	}
	msg := "This instance is starting."
	if what := g.waiting.Load(); what != nil {
		msg = "This instance is starting: " + *what
	}
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(checkapi.ErrorBody{Error: checkapi.ErrorDetail{Code: "starting", Message: msg}})
}

// WaitFor runs step until it succeeds, fails with an error retry refuses
// (configuration, which waiting does not mend), or ctx ends (then
// ErrStoppedStarting). Between attempts it waits with capped exponential
// backoff. It logs when it starts waiting (for what, and why), every minute
// while it goes on, and when the wait is over; /readyz says meanwhile what
// it waits for (without the error, which may name hosts and users).
func (g *StartGate) WaitFor(ctx context.Context, log *slog.Logger, what string, retry func(error) bool, step func(context.Context) error) error {
	since, reminded := time.Now(), time.Time{}
	backoff := startMinBackoff
	for attempts := 1; ; attempts++ {
		attemptCtx, cancel := context.WithTimeout(ctx, startAttemptTimeout)
		err := step(attemptCtx)
		cancel()
		if err == nil {
			if attempts > 1 {
				g.waiting.Store(nil)
				log.Info(what+" answered; starting", "waited", time.Since(since).Round(time.Millisecond).String(), "attempts", attempts)
			}
			return nil
		}
		if ctx.Err() != nil {
			log.Info("stopped while waiting for "+what, "waited", time.Since(since).Round(time.Millisecond).String())
			return ErrStoppedStarting
		}
		if !retry(err) {
			return err
		}
		switch {
		case attempts == 1:
			reminded = time.Now()
			log.Warn("waiting for "+what+" to answer; /healthz answers meanwhile, /readyz and every other path 503", "error", err,
				"retry_max_interval", startMaxBackoff.String())
		case time.Since(reminded) >= startReminder:
			reminded = time.Now()
			log.Warn("still waiting for "+what+" to answer", "error", err, "waited", time.Since(since).Round(time.Second).String(), "attempts", attempts)
		default:
			log.Debug("start attempt failed", "waiting_for", what, "error", err, "attempts", attempts)
		}
		msg := fmt.Sprintf("waiting for %s to answer (%d attempts over %s; the log says why).", what, attempts, time.Since(since).Round(time.Second))
		g.waiting.Store(&msg)
		select {
		case <-ctx.Done():
			log.Info("stopped while waiting for "+what, "waited", time.Since(since).Round(time.Millisecond).String())
			return ErrStoppedStarting
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		backoff = min(2*backoff, startMaxBackoff)
	}
}
