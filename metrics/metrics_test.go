package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluicelabs/sluice/metrics"
)

func TestMetrics(t *testing.T) {
	t.Run("records_each_family_by_its_labels", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		orders := m.Series(metrics.Labels{Source: metrics.SourceGateway, Rule: "orders"})
		orders.Count(metrics.ResultAllowed)
		orders.Count(metrics.ResultAllowed)
		m.Series(metrics.Labels{Source: metrics.SourceHTTP}).Count(metrics.ResultNoRule)
		orders.ObserveCheck(300 * time.Microsecond)
		m.ObserveStore(time.Millisecond, nil)
		m.ObserveStore(50*time.Millisecond, errors.New("timeout"))
		m.SetBreakerState("redis", metrics.BreakerOpen)
		m.DenyCacheHit()

		want := `
# HELP sluice_decisions_total Rate-limit decisions, by source (http, envoy, gateway, middleware), tenant (HTTP service), domain (Envoy), rule and result (allowed, denied, degraded, shadow_denied, shed, no_rule, error).
# TYPE sluice_decisions_total counter
sluice_decisions_total{domain="",result="allowed",rule="orders",source="gateway",tenant=""} 2
sluice_decisions_total{domain="",result="no_rule",rule="",source="http",tenant=""} 1
# HELP sluice_store_errors_total Store calls that failed or timed out (input errors and callers giving up are not counted).
# TYPE sluice_store_errors_total counter
sluice_store_errors_total 1
# HELP sluice_breaker_state State of the store circuit breaker: 0 closed, 1 half-open, 2 open.
# TYPE sluice_breaker_state gauge
sluice_breaker_state{breaker="redis"} 2
# HELP sluice_deny_cache_hits_total Checks denied from the local deny cache without a store round trip.
# TYPE sluice_deny_cache_hits_total counter
sluice_deny_cache_hits_total 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"sluice_decisions_total", "sluice_store_errors_total", "sluice_breaker_state", "sluice_deny_cache_hits_total"); err != nil {
			t.Fatal(err)
		}
		if n := testutil.CollectAndCount(reg, "sluice_check_duration_seconds", "sluice_store_duration_seconds"); n != 2 {
			t.Fatalf("histogram series = %d, want 2", n)
		}
	})

	t.Run("second_New_on_one_registry_shares_collectors", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		a, b := metrics.New(reg), metrics.New(reg)
		a.Series(metrics.Labels{Source: metrics.SourceHTTP, Rule: "r"}).Count(metrics.ResultDenied)
		b.Series(metrics.Labels{Source: metrics.SourceHTTP, Rule: "r"}).Count(metrics.ResultDenied)
		want := `
# HELP sluice_decisions_total Rate-limit decisions, by source (http, envoy, gateway, middleware), tenant (HTTP service), domain (Envoy), rule and result (allowed, denied, degraded, shadow_denied, shed, no_rule, error).
# TYPE sluice_decisions_total counter
sluice_decisions_total{domain="",result="denied",rule="r",source="http",tenant=""} 2
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("series_are_capped_with_an_overflow_and_dropped_with_their_rule", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.NewWithOptions(reg, metrics.Options{MaxRuleSeries: 2})
		m.Series(metrics.Labels{Source: metrics.SourceHTTP, Tenant: "acme", Rule: "a"}).Count(metrics.ResultAllowed)
		m.Series(metrics.Labels{Source: metrics.SourceEnvoy, Domain: "acme", Rule: "a"}).Count(metrics.ResultDenied)
		// Past the cap: counted under the overflow labels.
		third := m.Series(metrics.Labels{Source: metrics.SourceHTTP, Tenant: "other", Rule: "b"})
		third.Count(metrics.ResultAllowed)
		m.Series(metrics.Labels{Source: metrics.SourceHTTP, Tenant: "more", Rule: "c"}).Count(metrics.ResultAllowed)
		if l := third.Labels(); l.Rule != metrics.Overflow || l.Tenant != metrics.Overflow {
			t.Fatalf("third series labels = %+v, want the overflow", l)
		}
		want := `
` + "" + `# HELP sluice_decisions_total ` + strings.TrimPrefix("# HELP sluice_decisions_total Rate-limit decisions, by source (http, envoy, gateway, middleware), tenant (HTTP service), domain (Envoy), rule and result (allowed, denied, degraded, shadow_denied, shed, no_rule, error).", "# HELP sluice_decisions_total ") + `
# TYPE sluice_decisions_total counter
sluice_decisions_total{domain="",result="allowed",rule="a",source="http",tenant="acme"} 1
sluice_decisions_total{domain="_overflow",result="allowed",rule="_overflow",source="http",tenant="_overflow"} 2
sluice_decisions_total{domain="acme",result="denied",rule="a",source="envoy",tenant=""} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total"); err != nil {
			t.Fatal(err)
		}
		// The same labels twice are one series, two tenants' equal rule names are two.
		m.DropRule(metrics.SourceHTTP, "acme", "", "a")
		if n := testutil.CollectAndCount(reg, "sluice_decisions_total"); n != 2 {
			t.Fatalf("after dropping a rule: %d series, want 2", n)
		}
		// The dropped rule's place under the cap is free again.
		fresh := m.Series(metrics.Labels{Source: metrics.SourceHTTP, Tenant: "new", Rule: "d"})
		if l := fresh.Labels(); l.Rule != "d" {
			t.Fatalf("a series after a drop got %+v, want its own labels", l)
		}
		m.DropRule(metrics.SourceEnvoy, "", "acme", "")
		if n := testutil.CollectAndCount(reg, "sluice_decisions_total"); n != 1 {
			t.Fatalf("after dropping a domain: %d series, want 1", n)
		}
	})

	t.Run("nil_metrics_record_nothing_without_panicking", func(t *testing.T) {
		var m *metrics.Metrics
		m.Series(metrics.Labels{Source: metrics.SourceHTTP, Rule: "r"}).Count(metrics.ResultAllowed)
		var none *metrics.Series
		none.Count(metrics.ResultAllowed)
		none.ObserveCheck(time.Millisecond)
		m.ObserveStore(time.Millisecond, nil)
		m.SetBreakerState("b", metrics.BreakerClosed)
		m.DenyCacheHit()
	})

	t.Run("breaker_states_map_to_0_1_2", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		for state, want := range map[string]float64{metrics.BreakerClosed: 0, metrics.BreakerHalfOpen: 1, metrics.BreakerOpen: 2} {
			m.SetBreakerState("b", state)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got float64 = -1
			for _, mf := range mfs {
				if mf.GetName() == "sluice_breaker_state" {
					got = mf.GetMetric()[0].GetGauge().GetValue()
				}
			}
			if got != want {
				t.Errorf("state %q: gauge = %v, want %v", state, got, want)
			}
		}
	})
}
