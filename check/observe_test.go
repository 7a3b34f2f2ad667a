package check_test

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

// TestObserverSeesEveryCountedDecision: the observer gets the labels,
// subject and outcome of each counted check, deny-cache hits and shadow
// denies included, and nothing of a check on a rule made without NewRule.
func TestObserverSeesEveryCountedDecision(t *testing.T) {
	e := check.New(newMemory(t), check.Options{Metrics: metrics.New(prometheus.NewRegistry())})
	t.Cleanup(func() { e.Close() })
	type seen struct {
		labels  metrics.Labels
		subject string
		outcome check.Outcome
	}
	var mu sync.Mutex
	var got []seen
	e.SetObserver(func(l metrics.Labels, subject string, o check.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{l, subject, o})
	})
	labels := metrics.Labels{Source: "http", Tenant: "acme", Rule: "orders"}
	rule := e.NewRule(labels, check.Rule{Namespace: "ns", Name: "orders", Limits: hourly(1)})
	shadowLabels := metrics.Labels{Source: "http", Tenant: "acme", Rule: "shadow"}
	shadow := e.NewRule(shadowLabels, check.Rule{Namespace: "ns", Name: "shadow", Limits: hourly(1), Shadow: true})
	uncounted := &check.Rule{Namespace: "ns", Name: "orders", Limits: hourly(1)}
	ctx := context.Background()
	for _, q := range []check.Query{
		{Rule: rule, Subject: "u1", Cost: 1},
		{Rule: rule, Subject: "u1", Cost: 1}, // denied by the store
		{Rule: rule, Subject: "u1", Cost: 1}, // denied by the deny cache
		{Rule: shadow, Subject: "u2", Cost: 1},
		{Rule: shadow, Subject: "u2", Cost: 1},
		{Rule: uncounted, Subject: "u1", Cost: 0},
	} {
		if _, err := e.Check(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	want := []seen{
		{labels, "u1", check.Allowed}, {labels, "u1", check.Denied}, {labels, "u1", check.Denied},
		{shadowLabels, "u2", check.Allowed}, {shadowLabels, "u2", check.ShadowDenied},
	}
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("observation %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	e.SetObserver(nil)
	if _, err := e.Check(ctx, check.Query{Rule: rule, Subject: "u3", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("a check after SetObserver(nil) was observed: %v", got[len(want):])
	}
}
