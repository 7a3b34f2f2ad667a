package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// switchableStore is a real memory store that the guard's own tests can make
// fail or hang on demand. It tests the guard, not a store: the behaviour of
// real stores under outages is tested against Redis in redis_test.go.
type switchableStore struct {
	inner *memory.Store
	calls atomic.Int64
	state atomic.Int32 // one of healthy, failing, hanging
}

const (
	healthy int32 = iota
	failing
	hanging
)

var errBroken = errors.New("connection refused")

func newSwitchable(t *testing.T) *switchableStore {
	s := &switchableStore{inner: memory.New(memory.Options{})}
	t.Cleanup(func() { s.inner.Close() })
	return s
}

func (s *switchableStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s.calls.Add(1)
	switch s.state.Load() {
	case failing:
		return sluice.Decision{}, errBroken
	case hanging:
		<-ctx.Done()
		return sluice.Decision{}, ctx.Err()
	}
	return s.inner.Check(ctx, req)
}

func (s *switchableStore) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	s.calls.Add(1)
	if s.state.Load() != healthy {
		return errBroken
	}
	return s.inner.Reset(ctx, tenant, rule, subject, limits)
}

func request(subject string) sluice.Request {
	return sluice.Request{Rule: "api", Subject: subject, Limits: []sluice.Limit{sluice.FixedWindow(2, time.Minute).Named("minute")}, Cost: 1}
}

func TestGuardHealthyStorePassesDecisionsThrough(t *testing.T) {
	store := newSwitchable(t)
	g := guard.New(store, guard.Options{})
	defer g.Close()
	for i, want := range []bool{true, true, false} {
		d, err := g.Check(context.Background(), request("u"), sluice.FailClosed)
		if err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if d.Allowed != want || d.Degraded {
			t.Fatalf("check %d: %v (degraded %v), want allowed=%v, not degraded", i, d, d.Degraded, want)
		}
	}
	if d, _ := g.Check(context.Background(), request("u"), sluice.FailClosed); d.RetryAfter <= 0 || d.Limit != 2 {
		t.Fatalf("deny lost its figures: %v", d)
	}
}

func TestGuardFailureModes(t *testing.T) {
	tests := []struct {
		name  string
		mode  sluice.FailureMode
		check func(t *testing.T, ds []sluice.Decision, errs []error)
	}{
		{"closed_returns_store_unavailable", sluice.FailClosed, func(t *testing.T, ds []sluice.Decision, errs []error) {
			for i, err := range errs {
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Fatalf("check %d: err = %v, want ErrStoreUnavailable", i, err)
				}
			}
		}},
		{"empty_mode_fails_closed", "", func(t *testing.T, ds []sluice.Decision, errs []error) {
			for i, err := range errs {
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Fatalf("check %d: err = %v, want ErrStoreUnavailable", i, err)
				}
			}
		}},
		{"open_allows_degraded", sluice.FailOpen, func(t *testing.T, ds []sluice.Decision, errs []error) {
			for i := range ds {
				if errs[i] != nil || !ds[i].Allowed || !ds[i].Degraded {
					t.Fatalf("check %d: %v degraded=%v err=%v, want allowed and degraded", i, ds[i], ds[i].Degraded, errs[i])
				}
			}
		}},
		{"local_enforces_limit_in_process_degraded", sluice.FailLocal, func(t *testing.T, ds []sluice.Decision, errs []error) {
			want := []bool{true, true, false, false}
			for i := range ds {
				if errs[i] != nil || ds[i].Allowed != want[i] || !ds[i].Degraded {
					t.Fatalf("check %d: %v degraded=%v err=%v, want allowed=%v degraded", i, ds[i], ds[i].Degraded, errs[i], want[i])
				}
			}
			if ds[2].Limit != 2 || ds[2].RetryAfter <= 0 || len(ds[2].Limits) != 1 {
				t.Fatalf("local deny lacks its figures: %+v", ds[2])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newSwitchable(t)
			store.state.Store(failing)
			g := guard.New(store, guard.Options{FailureThreshold: 2})
			defer g.Close()
			var ds []sluice.Decision
			var errs []error
			// Four checks: two failures reach the store, then the breaker
			// is open; the policy must answer the same either way.
			for range 4 {
				d, err := g.Check(context.Background(), request("u"), tt.mode)
				ds, errs = append(ds, d), append(errs, err)
			}
			tt.check(t, ds, errs)
			if n := store.calls.Load(); n != 2 {
				t.Fatalf("store calls = %d, want 2 (the breaker opens after 2 failures)", n)
			}
		})
	}
}

func TestGuardInvalidInputIsNotAStoreFailure(t *testing.T) {
	invalid := request("u")
	invalid.Cost = 3 // more than the limit of 2 can ever hold

	t.Run("store_up_returns_err_invalid_and_breaker_stays_closed", func(t *testing.T) {
		store := newSwitchable(t)
		g := guard.New(store, guard.Options{FailureThreshold: 1})
		defer g.Close()
		for range 5 {
			_, err := g.Check(context.Background(), invalid, sluice.FailOpen)
			if !errors.Is(err, sluice.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		}
		if s := g.State(); s != "closed" {
			t.Fatalf("breaker %s after input errors, want closed", s)
		}
	})

	t.Run("store_down_still_rejects_it_instead_of_failing_open", func(t *testing.T) {
		store := newSwitchable(t)
		store.state.Store(failing)
		g := guard.New(store, guard.Options{FailureThreshold: 1})
		defer g.Close()
		for _, mode := range []sluice.FailureMode{sluice.FailOpen, sluice.FailLocal, sluice.FailClosed} {
			d, err := g.Check(context.Background(), invalid, mode)
			if !errors.Is(err, sluice.ErrInvalid) || d.Allowed {
				t.Fatalf("mode %s: %v err=%v, want ErrInvalid", mode, d, err)
			}
		}
	})
}

func TestGuardCallerCancellationIsNotAStoreFailure(t *testing.T) {
	store := newSwitchable(t)
	store.state.Store(hanging)
	// Each call waits out the guard's deadline (the store hangs, and the
	// caller's cancellation is not passed on), far longer than the
	// caller's 10ms.
	g := guard.New(store, guard.Options{FailureThreshold: 1, Timeout: 2 * time.Second})
	defer g.Close()

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		d, err := g.Check(ctx, request("u"), sluice.FailOpen)
		if !errors.Is(err, context.Canceled) || d.Allowed {
			t.Fatalf("%v err=%v, want context.Canceled and no fail-open allow", d, err)
		}
	})
	t.Run("caller_deadline_shorter_than_guard_timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err := g.Check(ctx, request("u"), sluice.FailClosed)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("err = %v, want the caller's DeadlineExceeded", err)
		}
	})
	if s := g.State(); s != "closed" {
		t.Fatalf("breaker %s after caller cancellations, want closed", s)
	}
}

func TestGuardHungStoreCostsTheDeadlineThenNothing(t *testing.T) {
	store := newSwitchable(t)
	store.state.Store(hanging)
	g := guard.New(store, guard.Options{Timeout: 20 * time.Millisecond, FailureThreshold: 3, OpenTimeout: time.Hour})
	defer g.Close()
	for i := range 3 {
		_, err := g.Check(context.Background(), request("u"), sluice.FailClosed)
		if !errors.Is(err, sluice.ErrStoreUnavailable) || errors.Is(err, guard.ErrBreakerOpen) {
			t.Fatalf("check %d: err = %v, want a store timeout", i, err)
		}
	}
	if s := g.State(); s != "open" {
		t.Fatalf("breaker %s after 3 timeouts, want open", s)
	}
	for range 100 {
		_, err := g.Check(context.Background(), request("u"), sluice.FailClosed)
		if !errors.Is(err, guard.ErrBreakerOpen) || !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("err = %v, want ErrBreakerOpen wrapping ErrStoreUnavailable", err)
		}
	}
	if n := store.calls.Load(); n != 3 {
		t.Fatalf("store calls = %d, want 3: an open breaker must not touch the store", n)
	}
}

func TestGuardBreakerProbesAndCloses(t *testing.T) {
	store := newSwitchable(t)
	store.state.Store(failing)
	var mu sync.Mutex
	var transitions []string
	reg := prometheus.NewRegistry()
	g := guard.New(store, guard.Options{
		Name: "redis", FailureThreshold: 2, OpenTimeout: 30 * time.Millisecond,
		Metrics: metrics.New(reg),
		OnStateChange: func(name, from, to string) {
			mu.Lock()
			defer mu.Unlock()
			transitions = append(transitions, name+":"+from+"->"+to)
		},
	})
	defer g.Close()
	for range 2 {
		g.Check(context.Background(), request("u"), sluice.FailOpen)
	}
	if s := g.State(); s != "open" {
		t.Fatalf("breaker %s, want open", s)
	}
	if v := breakerGauge(t, reg); v != 2 {
		t.Fatalf("breaker gauge = %v, want 2 (open)", v)
	}

	waitState(t, g, "half-open")
	// A failed probe opens it again, after exactly one store call.
	before := store.calls.Load()
	g.Check(context.Background(), request("u"), sluice.FailOpen)
	if n := store.calls.Load() - before; n != 1 || g.State() != "open" {
		t.Fatalf("failed probe: %d store calls, state %s; want 1 call, open", n, g.State())
	}

	store.state.Store(healthy)
	waitState(t, g, "half-open")
	d, err := g.Check(context.Background(), request("u"), sluice.FailOpen)
	if err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("probe on a healthy store: %v degraded=%v err=%v, want a real allow", d, d.Degraded, err)
	}
	if s := g.State(); s != "closed" {
		t.Fatalf("breaker %s after a successful probe, want closed", s)
	}
	if v := breakerGauge(t, reg); v != 0 {
		t.Fatalf("breaker gauge = %v, want 0 (closed)", v)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"redis:closed->open", "redis:open->half-open", "redis:half-open->open", "redis:open->half-open", "redis:half-open->closed"}
	if len(transitions) != len(want) {
		t.Fatalf("transitions = %v, want %v", transitions, want)
	}
	for i := range want {
		if transitions[i] != want[i] {
			t.Fatalf("transitions = %v, want %v", transitions, want)
		}
	}
}

func TestGuardCountsStoreErrorsInMetrics(t *testing.T) {
	store := newSwitchable(t)
	reg := prometheus.NewRegistry()
	g := guard.New(store, guard.Options{Metrics: metrics.New(reg), FailureThreshold: 100})
	defer g.Close()
	g.Check(context.Background(), request("u"), sluice.FailOpen)
	store.state.Store(failing)
	g.Check(context.Background(), request("u"), sluice.FailOpen)
	g.Check(context.Background(), request("u"), sluice.FailOpen)
	invalid := request("u")
	invalid.Cost = -1
	store.state.Store(healthy)
	g.Check(context.Background(), invalid, sluice.FailOpen)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var storeCalls uint64
	var storeErrors float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_store_duration_seconds":
			storeCalls = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		case "sluice_store_errors_total":
			storeErrors = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if storeCalls != 3 || storeErrors != 2 {
		t.Fatalf("store calls observed = %d, errors = %v; want 3 and 2 (input errors are not store calls' failures)", storeCalls, storeErrors)
	}
}

func TestGuardReset(t *testing.T) {
	store := newSwitchable(t)
	g := guard.New(store, guard.Options{FailureThreshold: 1})
	defer g.Close()
	req := request("u")
	for range 2 {
		g.Check(context.Background(), req, sluice.FailClosed)
	}
	if err := g.Reset(context.Background(), req.Tenant, req.Rule, req.Subject, req.Limits); err != nil {
		t.Fatal(err)
	}
	if d, err := g.Check(context.Background(), req, sluice.FailClosed); err != nil || d.Remaining != 1 {
		t.Fatalf("after reset: %v err=%v, want a fresh counter", d, err)
	}
	store.state.Store(failing)
	if err := g.Reset(context.Background(), req.Tenant, req.Rule, req.Subject, req.Limits); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("reset on a failing store: %v, want ErrStoreUnavailable", err)
	}
}

func TestGuardResetAlsoForgetsTheLocalFallback(t *testing.T) {
	store := newSwitchable(t)
	g := guard.New(store, guard.Options{FailureThreshold: 100})
	defer g.Close()
	req := request("u")
	store.state.Store(failing)
	for range 2 {
		g.Check(context.Background(), req, sluice.FailLocal)
	}
	if d, _ := g.Check(context.Background(), req, sluice.FailLocal); d.Allowed {
		t.Fatalf("the local fallback did not count: %v", d)
	}
	store.state.Store(healthy)
	if err := g.Reset(context.Background(), req.Tenant, req.Rule, req.Subject, req.Limits); err != nil {
		t.Fatal(err)
	}
	store.state.Store(failing)
	if d, err := g.Check(context.Background(), req, sluice.FailLocal); err != nil || !d.Allowed || !d.Degraded {
		t.Fatalf("after a reset the fallback still holds the old count: %v err=%v", d, err)
	}
}

// breakerGauge reads the single sluice_breaker_state series of reg.
func breakerGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sluice_breaker_state" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no sluice_breaker_state metric")
	return 0
}

func waitState(t *testing.T, g *guard.Guard, want string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "breaker "+want, func() bool { return g.State() == want })
}

// TestGuardHalfOpenLetsOneProbeThrough: while the breaker is half-open, one
// probe reaches the store and every concurrent check is answered by the
// failure policy without touching it; a probe whose caller gave up frees the
// slot instead of deciding the breaker's state.
func TestGuardHalfOpenLetsOneProbeThrough(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out two 5s store deadlines: skipped under -short")
	}
	store := newSwitchable(t)
	store.state.Store(failing)
	g := guard.New(store, guard.Options{FailureThreshold: 1, OpenTimeout: 20 * time.Millisecond, Timeout: 5 * time.Second})
	defer g.Close()
	g.Check(context.Background(), request("u"), sluice.FailOpen)
	waitState(t, g, "half-open")

	// A probe whose caller hangs up is not the store's fault: the breaker
	// stays half-open and the next check probes.
	store.state.Store(hanging)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	before := store.calls.Load()
	if _, err := g.Check(gone, request("u"), sluice.FailOpen); !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned probe: err = %v, want context.Canceled", err)
	}
	if n := store.calls.Load() - before; n != 1 || g.State() != "half-open" {
		t.Fatalf("abandoned probe: %d store calls, state %s; want 1, half-open", n, g.State())
	}

	// A probe that hangs holds the only slot.
	probeCtx, stopProbe := context.WithCancel(context.Background())
	defer stopProbe()
	before = store.calls.Load()
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		g.Check(probeCtx, request("u"), sluice.FailOpen)
	}()
	testenv.Eventually(t, 5*time.Second, "the probe reaches the store", func() bool { return store.calls.Load() != before })
	var wg sync.WaitGroup
	var degraded atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := g.Check(context.Background(), request("u"), sluice.FailOpen); err == nil && d.Allowed && d.Degraded {
				degraded.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := store.calls.Load() - before; n != 1 || degraded.Load() != 20 {
		t.Fatalf("while a probe is in flight: %d store calls, %d degraded answers; want 1 and 20", n, degraded.Load())
	}
	stopProbe()
	<-probeDone
}

// unreadStore answers at once, except that checks of subject "unread" are
// never answered in time: like a reply waiting in a socket while this
// process is too busy to read it, while the store answers other calls.
type unreadStore struct {
	inner   *memory.Store
	waiting chan struct{} // receives once per unread call that started
}

func (s *unreadStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	if req.Subject == "unread" {
		s.waiting <- struct{}{}
		<-ctx.Done()
		return sluice.Decision{}, fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, ctx.Err())
	}
	return s.inner.Check(ctx, req)
}

func (s *unreadStore) Reset(ctx context.Context, tenant, rule, subject string, limits []sluice.Limit) error {
	return s.inner.Reset(ctx, tenant, rule, subject, limits)
}

// TestGuardTimeoutsWhileTheStoreAnswersAreOverloadNotFailure: a call left
// unanswered while the store answered other calls meanwhile is not the
// store's failure: the store is alive, so the call waits out the maximum wait
// and returns ErrOverloaded, applies no failure policy and never opens the
// breaker. The same calls with nothing answered meanwhile make the store
// unresponsive: store failures that do open it.
func TestGuardTimeoutsWhileTheStoreAnswersAreOverloadNotFailure(t *testing.T) {
	inner := memory.New(memory.Options{})
	t.Cleanup(func() { inner.Close() })
	store := &unreadStore{inner: inner, waiting: make(chan struct{}, 1)}
	var trips atomic.Int64
	g := guard.New(store, guard.Options{Timeout: 30 * time.Millisecond, MaxWait: 150 * time.Millisecond, FailureThreshold: 2, OpenTimeout: time.Hour,
		OnStateChange: func(_, _, to string) {
			if to == "open" {
				trips.Add(1)
			}
		}})
	defer g.Close()
	for i := range 2 * 5 {
		errc := make(chan error, 1)
		go func() {
			_, err := g.Check(context.Background(), request("unread"), sluice.FailOpen)
			errc <- err
		}()
		<-store.waiting
		// The store answers another call while the first waits.
		if _, err := g.Check(context.Background(), request(fmt.Sprint("other", i)), sluice.FailClosed); err != nil {
			t.Fatalf("call %d beside the unread one: %v", i, err)
		}
		if err := <-errc; !errors.Is(err, guard.ErrOverloaded) || errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("call %d: err = %v, want ErrOverloaded (and no failure policy: it fails open otherwise)", i, err)
		}
	}
	if trips.Load() != 0 || g.State() != "closed" {
		t.Fatalf("breaker tripped %d times (state %s) on timeouts of an answering store", trips.Load(), g.State())
	}

	// Nothing answered meanwhile: the store is at fault.
	for i := range 2 {
		go func() { <-store.waiting }()
		d, err := g.Check(context.Background(), request("unread"), sluice.FailOpen)
		if err != nil || !d.Degraded {
			t.Fatalf("lone timeout %d: %v, %v; want the failure policy's degraded allow", i, d, err)
		}
	}
	if trips.Load() != 1 || g.State() != "open" {
		t.Fatalf("breaker tripped %d times (state %s) after timeouts with no answers, want open", trips.Load(), g.State())
	}
}

// TestGuardBudgetRefusalsDoNotOpenTheBreaker: a tenant flooding the memory
// store past its budget gets its own checks refused (by their failure
// policy), and never opens the breaker that every tenant shares: another
// tenant's exhausted subject stays denied by the store.
func TestGuardBudgetRefusalsDoNotOpenTheBreaker(t *testing.T) {
	store := memory.New(memory.Options{MaxKeys: 1000, MaxKeysPerTenant: 10})
	t.Cleanup(func() { store.Close() })
	g := guard.New(store, guard.Options{FailureThreshold: 2})
	defer g.Close()
	ctx := context.Background()
	hourly := []sluice.Limit{sluice.FixedWindow(1, time.Hour).Named("hour")}
	a := sluice.Request{Tenant: "a", Rule: "r", Subject: "s", Limits: hourly, Cost: 1}
	if d, err := g.Check(ctx, a, sluice.FailOpen); err != nil || !d.Allowed {
		t.Fatalf("a's first check: %v, %v", d, err)
	}
	for i := range 50 {
		b := sluice.Request{Tenant: "b", Rule: "r", Subject: fmt.Sprint("flood-", i), Limits: hourly, Cost: 1}
		d, err := g.Check(ctx, b, sluice.FailClosed)
		if i >= 10 && !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("b's subject %d past its budget: %v, %v; want refused by its policy", i, d, err)
		}
	}
	if st := g.State(); st != "closed" {
		t.Fatalf("breaker %s after one tenant's budget refusals, want closed", st)
	}
	if d, err := g.Check(ctx, a, sluice.FailOpen); err != nil || d.Allowed || d.Degraded {
		t.Fatalf("a's exhausted subject after b's flood: %v (degraded %v), %v; want the store's deny", d, d.Degraded, err)
	}
}
