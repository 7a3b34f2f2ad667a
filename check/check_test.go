package check_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// gateStore holds every check until its gate opens, counting the calls.
type gateStore struct {
	sluice.Store
	gate    chan struct{}
	entered chan struct{}
	calls   atomic.Int64
}

func (s *gateStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s.calls.Add(1)
	if s.gate != nil {
		s.entered <- struct{}{}
		<-s.gate
	}
	return s.Store.Check(ctx, req)
}

func newMemory(t testing.TB) *memory.Store {
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	return m
}

func hourly(n int64) []sluice.Limit {
	return []sluice.Limit{sluice.FixedWindow(n, time.Hour).Named("hour")}
}

// TestShedPastMaxInFlight: with MaxInFlight checks waiting for the store,
// one more is answered at once, without a store call, by its rule's mode:
// refused with ErrOverloaded when failing closed, allowed (degraded) when
// failing open, and decided in process when failing local.
func TestShedPastMaxInFlight(t *testing.T) {
	store := &gateStore{Store: newMemory(t), gate: make(chan struct{}), entered: make(chan struct{}, 2)}
	reg := prometheus.NewRegistry()
	e := check.New(store, check.Options{MaxInFlight: 2, Metrics: metrics.New(reg)})
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	rule := func(mode sluice.FailureMode) *check.Rule {
		return e.NewRule(metrics.Labels{Source: "test", Rule: string(mode)}, check.Rule{Namespace: "t", Name: string(mode), Limits: hourly(5), Mode: mode})
	}
	closed, open, local := rule(sluice.FailClosed), rule(sluice.FailOpen), rule(sluice.FailLocal)

	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.Check(ctx, check.Query{Rule: closed, Subject: "waiting", Cost: 1})
			done <- err
		}()
		<-store.entered
	}
	calls := store.calls.Load()
	if _, err := e.Check(ctx, check.Query{Rule: closed, Subject: "s", Cost: 1}); !errors.Is(err, check.ErrOverloaded) {
		t.Fatalf("fail closed past the bound: %v, want ErrOverloaded", err)
	}
	if res, err := e.Check(ctx, check.Query{Rule: open, Subject: "s", Cost: 1}); err != nil || res.Outcome != check.Degraded || !res.Pass() {
		t.Fatalf("fail open past the bound: %+v, %v; want a degraded pass", res, err)
	}
	res, err := e.Check(ctx, check.Query{Rule: local, Subject: "s", Cost: 1})
	if err != nil || res.Outcome != check.Degraded || res.Decision.Limit != 5 || res.Decision.Remaining != 4 {
		t.Fatalf("fail local past the bound: %+v, %v; want the in-process limiter's decision", res, err)
	}
	if n := store.calls.Load() - calls; n != 0 {
		t.Fatalf("%d store calls for shed checks, want 0", n)
	}
	close(store.gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a check within the bound: %v", err)
		}
	}
	expected := `
# HELP sluice_shed_total Checks this process was past its capacity for: the queue for the store full, a check's wait past --max-wait, or a store call missing its deadline while the store answered others. Fail-closed rules refuse them (503 overloaded, RESOURCE_EXHAUSTED); open and local rules answer them by their failure mode.
# TYPE sluice_shed_total counter
sluice_shed_total 3
`
	// Every mode's check was shed; only the fail-closed one was refused.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "sluice_shed_total"); err != nil {
		t.Fatal(err)
	}
}

// TestOutcomesAndMetrics: each outcome counted once under its rule, a shadow
// rule's deny passes, and a deny answered by the deny cache makes no store
// call until a reset.
func TestOutcomesAndMetrics(t *testing.T) {
	store := &gateStore{Store: newMemory(t)}
	reg := prometheus.NewRegistry()
	e := check.New(store, check.Options{Metrics: metrics.New(reg)})
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	enforced := e.NewRule(metrics.Labels{Source: "http", Tenant: "acme", Rule: "enforced"}, check.Rule{Namespace: "acme@1", Name: "enforced", Limits: hourly(1)})
	shadow := e.NewRule(metrics.Labels{Source: "http", Tenant: "acme", Rule: "shadow"}, check.Rule{Namespace: "acme@1", Name: "shadow", Limits: hourly(1), Shadow: true})

	want := []struct {
		rule    *check.Rule
		outcome check.Outcome
		pass    bool
	}{
		{enforced, check.Allowed, true},
		{enforced, check.Denied, false},
		{enforced, check.Denied, false}, // from the deny cache
		{shadow, check.Allowed, true},
		{shadow, check.ShadowDenied, true},
	}
	for i, w := range want {
		res, err := e.Check(ctx, check.Query{Rule: w.rule, Subject: "s", Cost: 1})
		if err != nil || res.Outcome != w.outcome || res.Pass() != w.pass {
			t.Fatalf("check %d: %+v, %v; want outcome %v, pass %v", i, res, err, w.outcome, w.pass)
		}
	}
	if n := store.calls.Load(); n != 4 {
		t.Fatalf("%d store calls, want 4 (the repeated deny answered in process)", n)
	}
	if _, err := e.Check(ctx, check.Query{Rule: enforced, Subject: "s", Cost: -1}); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("negative cost: %v, want ErrInvalid", err)
	}
	if err := e.Reset(ctx, enforced, "s"); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Check(ctx, check.Query{Rule: enforced, Subject: "s", Cost: 1}); err != nil || res.Outcome != check.Allowed || res.Cached {
		t.Fatalf("after a reset: %+v, %v; want a fresh allow from the store", res, err)
	}
	expected := `
# HELP sluice_decisions_total Rate-limit decisions, by source (http, envoy, gateway, middleware), tenant (HTTP service), domain (Envoy), rule and result (allowed, denied, degraded, shadow_denied, shed, no_rule, error).
# TYPE sluice_decisions_total counter
sluice_decisions_total{domain="",result="allowed",rule="enforced",source="http",tenant="acme"} 2
sluice_decisions_total{domain="",result="denied",rule="enforced",source="http",tenant="acme"} 2
sluice_decisions_total{domain="",result="error",rule="enforced",source="http",tenant="acme"} 1
sluice_decisions_total{domain="",result="allowed",rule="shadow",source="http",tenant="acme"} 1
sluice_decisions_total{domain="",result="shadow_denied",rule="shadow",source="http",tenant="acme"} 1
# HELP sluice_deny_cache_hits_total Checks denied from the local deny cache without a store round trip.
# TYPE sluice_deny_cache_hits_total counter
sluice_deny_cache_hits_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "sluice_decisions_total", "sluice_deny_cache_hits_total"); err != nil {
		t.Fatal(err)
	}
}

// TestShedPastMaxInFlightPerNamespace: one namespace with its share of the
// queue waiting is shed past it, while another namespace's check still goes
// to the store: one tenant's flood cannot fill the queue every tenant shares.
func TestShedPastMaxInFlightPerNamespace(t *testing.T) {
	store := &gateStore{Store: newMemory(t), gate: make(chan struct{}), entered: make(chan struct{}, 3)}
	e := check.New(store, check.Options{MaxInFlight: 4, MaxInFlightPerNamespace: 2})
	t.Cleanup(func() { e.Close() })
	rule := func(namespace string) *check.Rule {
		return e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: namespace, Name: "r", Limits: hourly(5)})
	}
	flood, other := rule("flood"), rule("other")
	ctx := context.Background()
	done := make(chan error, 3)
	for range 2 {
		go func() {
			_, err := e.Check(ctx, check.Query{Rule: flood, Subject: "s", Cost: 1})
			done <- err
		}()
		<-store.entered
	}
	third := make(chan error, 1)
	go func() {
		_, err := e.Check(ctx, check.Query{Rule: flood, Subject: "s", Cost: 1})
		third <- err
	}()
	select {
	case err := <-third:
		if !errors.Is(err, check.ErrOverloaded) {
			t.Fatalf("a third check of the flooding namespace: %v, want ErrOverloaded", err)
		}
	case <-store.entered:
		t.Fatal("a third check of the flooding namespace reached the store past the namespace's share")
	}
	go func() {
		_, err := e.Check(ctx, check.Query{Rule: other, Subject: "s", Cost: 1})
		done <- err
	}()
	<-store.entered // the other namespace's check reached the store
	close(store.gate)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("a check within the bounds: %v", err)
		}
	}
	// The shares are given back: the flooding namespace is served again.
	if res, err := e.Check(ctx, check.Query{Rule: flood, Subject: "s", Cost: 1}); err != nil || res.Outcome != check.Allowed {
		t.Fatalf("after the queue drained: %+v, %v", res, err)
	}
}
