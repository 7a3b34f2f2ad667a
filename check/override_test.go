package check_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

func admitted(t *testing.T, e *check.Engine, q check.Query, n int) (int, check.Result) {
	t.Helper()
	got := 0
	var last check.Result
	for i := 0; i < n; i++ {
		res, err := e.Check(context.Background(), q)
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		if res.Pass() {
			got++
		}
		last = res
	}
	return got, last
}

// TestPlanThenOverrideChooseTheLimits: a check gets its plan's limits, an
// override on top replaces them, and the result names both.
func TestPlanThenOverrideChooseTheLimits(t *testing.T) {
	e := check.New(newMemory(t), check.Options{})
	t.Cleanup(func() { e.Close() })
	overrides := []sluice.Override{{Name: "vips", Subjects: []string{"vip-*"}, Limits: hourly(5)}}
	r := e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(1),
		Plans: sluice.Plans{"pro": hourly(3)}, Overrides: sluice.NewOverrideMatcher(overrides)})
	for _, c := range []struct {
		plan, subject, override string
		admits                  int
	}{
		{"", "free-user", "", 1},
		{"pro", "pro-user", "", 3},
		{"pro", "vip-1", "vips", 5},
		{"", "vip-", "vips", 5},
	} {
		got, last := admitted(t, e, check.Query{Rule: r, Subject: c.subject, Cost: 1, Plan: c.plan}, 8)
		if got != c.admits || last.Plan != c.plan || last.Override != c.override {
			t.Errorf("plan %q subject %q: admitted %d, result %+v; want %d under override %q", c.plan, c.subject, got, last, c.admits, c.override)
		}
	}
	_, err := e.Check(context.Background(), check.Query{Rule: r, Subject: "x", Cost: 1, Plan: "gold"})
	if !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "pro") {
		t.Fatalf("unknown plan: %v; want ErrInvalid naming pro", err)
	}
}

// TestOverrideKeepsCountersByLimitName: an override whose limit has the
// rule's limit's name, algorithm and window counts on the same counter, so
// applying and removing it neither resets nor forgets what was spent.
func TestOverrideKeepsCountersByLimitName(t *testing.T) {
	e := check.New(newMemory(t), check.Options{})
	t.Cleanup(func() { e.Close() })
	plain := e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(2)})
	q := check.Query{Rule: plain, Subject: "acme-corp", Cost: 1}
	if got, _ := admitted(t, e, q, 3); got != 2 {
		t.Fatalf("plain rule admitted %d; want 2", got)
	}
	q.Rule = e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(2),
		Overrides: sluice.NewOverrideMatcher([]sluice.Override{{Name: "boost", Subjects: []string{"acme-corp"}, Limits: hourly(5)}})})
	if got, last := admitted(t, e, q, 5); got != 3 || last.Override != "boost" {
		t.Fatalf("with override admitted %d (%+v); want the 3 left of 5", got, last)
	}
	q.Rule = e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(2)})
	if got, _ := admitted(t, e, q, 2); got != 0 {
		t.Fatalf("after removing the override admitted %d; want 0 (5 spent of 2)", got)
	}
}

// TestExpiredOverrideStopsOnEveryEngine: two engines over one store; an
// override expiring about a second ahead applies before, and no check
// started after expires_at gets it, on either engine, with no rule rebuilt.
// The deny cache does not carry a deny taken under the override past it.
func TestExpiredOverrideStopsOnEveryEngine(t *testing.T) {
	store := newMemory(t)
	expires := time.Now().Add(1200 * time.Millisecond)
	overrides := []sluice.Override{{Name: "tight", Subjects: []string{"acme-corp"}, Limits: hourly(1), ExpiresAt: expires}}
	var queries []check.Query
	var engines []*check.Engine
	for i := 0; i < 2; i++ {
		e := check.New(store, check.Options{})
		t.Cleanup(func() { e.Close() })
		r := e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(1000),
			Overrides: sluice.NewOverrideMatcher(overrides)})
		engines = append(engines, e)
		queries = append(queries, check.Query{Rule: r, Subject: "acme-corp", Cost: 1})
	}
	var before, after [2]int
	deadline := expires.Add(10 * time.Second) // a bound on the loop, not the assertion
	for after[0] < 3 || after[1] < 3 {
		for i, e := range engines {
			start := time.Now()
			res, err := e.Check(context.Background(), queries[i])
			if err != nil {
				t.Fatal(err)
			}
			if start.Before(expires) {
				if res.Override != "tight" {
					t.Fatalf("engine %d: before expiry got %+v; want override tight", i, res)
				}
				before[i]++
				continue
			}
			if res.Override != "" || !res.Pass() {
				t.Fatalf("engine %d: a check started %v after expires_at got %+v; want the rule's limits", i, start.Sub(expires), res)
			}
			after[i]++
		}
		if time.Now().After(deadline) {
			t.Fatal("loop bound passed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if before[0] == 0 || before[1] == 0 {
		t.Fatalf("checks before expiry per engine: %v; the machine was too slow to see the override apply", before)
	}
}

// BenchmarkCheckResolution: a check through a plan and an override against
// a plain check of the same limits, on the memory store, allowed each time.
func BenchmarkCheckResolution(b *testing.B) {
	e := check.New(newMemory(b), check.Options{})
	b.Cleanup(func() { e.Close() })
	limits := hourly(1 << 40)
	overrides := []sluice.Override{
		{Name: "vips", Subjects: []string{"vip-*"}, Limits: hourly(1 << 40)},
		{Name: "one", Subjects: []string{"acme-corp"}, Limits: hourly(1 << 40)},
	}
	plain := e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "plain", Limits: limits})
	resolved := e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "resolved", Limits: limits,
		Plans: sluice.Plans{"pro": hourly(1 << 40)}, Overrides: sluice.NewOverrideMatcher(overrides)})
	ctx := context.Background()
	for _, c := range []struct {
		name string
		q    check.Query
	}{
		{"plain", check.Query{Rule: plain, Subject: "vip-7", Cost: 1}},
		{"plan", check.Query{Rule: resolved, Subject: "someone", Cost: 1, Plan: "pro"}},
		{"override", check.Query{Rule: resolved, Subject: "vip-7", Cost: 1, Plan: "pro"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := e.Check(ctx, c.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDenyCacheKeepsPlansApart: a deny taken under the free plan is not the
// answer to the same subject's check under pro, whose limit has room.
func TestDenyCacheKeepsPlansApart(t *testing.T) {
	e := check.New(newMemory(t), check.Options{})
	t.Cleanup(func() { e.Close() })
	r := e.NewRule(metrics.Labels{}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(1),
		Plans: sluice.Plans{"free": hourly(1), "pro": hourly(3)}})
	free := check.Query{Rule: r, Subject: "cust", Cost: 1, Plan: "free"}
	if got, last := admitted(t, e, free, 3); got != 1 || !last.Cached {
		t.Fatalf("free admitted %d (last %+v); want 1 and the last deny from the cache", got, last)
	}
	pro := free
	pro.Plan = "pro"
	if got, last := admitted(t, e, pro, 3); got != 2 || last.Plan != "pro" {
		t.Fatalf("pro after free's deny admitted %d (%+v); want the 2 left of 3", got, last)
	}
}
