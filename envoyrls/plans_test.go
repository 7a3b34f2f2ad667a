package envoyrls_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
)

const plansYAML = `
domain: plans
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
    plans:
      pro:
        rate_limit: {unit: minute, requests_per_unit: 5}
      enterprise:
        rate_limits:
          - {unit: minute, requests_per_unit: 100}
          - {unit: hour, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
`

const plansAONYAML = `
domain: plans_aon
all_or_nothing: true
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
    plans:
      pro:
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// codesOf calls n times and writes + for OK, - for OVER_LIMIT.
func codesOf(t *testing.T, c rlspb.RateLimitServiceClient, domain string, n int, descs func() []*ratelimitv3.RateLimitDescriptor) string {
	t.Helper()
	var b strings.Builder
	for range n {
		if call(t, c, domain, descs()...).OverallCode == ok {
			b.WriteByte('+')
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

func oneDesc(kv ...string) func() []*ratelimitv3.RateLimitDescriptor {
	return func() []*ratelimitv3.RateLimitDescriptor { return []*ratelimitv3.RateLimitDescriptor{desc(kv...)} }
}

func TestPlansPickedByDescriptorEntry(t *testing.T) {
	srv, clock := memoryServer(t, configDir(t, plansYAML), envoyrls.Options{})
	c := serve(t, srv)

	if got := codesOf(t, c, "plans", 3, oneDesc("api_key", "free-1")); got != "++-" {
		t.Errorf("no plan entry: %s, want ++- (the descriptor's own 2 per minute)", got)
	}
	// The plan entry may stand anywhere among the entries; it is not
	// matched, so api_key alone still finds the descriptor.
	if got := codesOf(t, c, "plans", 6, oneDesc("sluice_plan", "pro", "api_key", "pro-1")); got != "+++++-" {
		t.Errorf("sluice_plan=pro first: %s, want +++++-", got)
	}
	if got := codesOf(t, c, "plans", 6, oneDesc("api_key", "pro-2", "sluice_plan", "pro")); got != "+++++-" {
		t.Errorf("sluice_plan=pro last: %s, want +++++-", got)
	}
	// An empty plan value is no plan.
	if got := codesOf(t, c, "plans", 3, oneDesc("api_key", "free-2", "sluice_plan", "")); got != "++-" {
		t.Errorf("empty sluice_plan: %s, want ++-", got)
	}

	// The status reports the plan's limit, not the descriptor's.
	resp := call(t, c, "plans", desc("api_key", "pro-3", "sluice_plan", "pro"))
	if st := resp.Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 5 || st.LimitRemaining != 4 {
		t.Errorf("pro status: current_limit %v, remaining %d; want 5 per minute, 4 remaining", st.CurrentLimit, st.LimitRemaining)
	}

	// A plan with several limits: the hourly 3 bites before the minute's 100.
	if got := codesOf(t, c, "plans", 4, oneDesc("api_key", "ent-1", "sluice_plan", "enterprise")); got != "+++-" {
		t.Errorf("enterprise: %s, want +++-", got)
	}

	// A limit of the same name counts on the same counter whichever set
	// the subject's checks resolve to: two spent without a plan leave
	// three of pro's five.
	if got := codesOf(t, c, "plans", 2, oneDesc("api_key", "moving")); got != "++" {
		t.Fatalf("moving, no plan: %s, want ++", got)
	}
	if got := codesOf(t, c, "plans", 4, oneDesc("api_key", "moving", "sluice_plan", "pro")); got != "+++-" {
		t.Errorf("moving, then pro: %s, want +++- (per_minute keeps its count)", got)
	}
	clock.Advance(time.Minute)
	if got := codesOf(t, c, "plans", 6, oneDesc("api_key", "moving", "sluice_plan", "pro")); got != "+++++-" {
		t.Errorf("moving, next minute: %s, want +++++-", got)
	}
}

func TestPlansBadRequestsChangeNothing(t *testing.T) {
	srv, _ := memoryServer(t, configDir(t, plansYAML), envoyrls.Options{})
	c := serve(t, srv)
	tests := []struct {
		name  string
		descs []*ratelimitv3.RateLimitDescriptor
		want  []string
	}{
		{"unknown plan", []*ratelimitv3.RateLimitDescriptor{desc("ip", "1.2.3.4"), desc("api_key", "k", "sluice_plan", "gold")},
			[]string{`unknown plan "gold"`, "enterprise, pro", "descriptor 1", "api_key"}},
		{"a plan for a descriptor without plans", []*ratelimitv3.RateLimitDescriptor{desc("ip", "1.2.3.4", "sluice_plan", "pro")},
			[]string{`unknown plan "pro"`, "no plans"}},
		{"two plan entries", []*ratelimitv3.RateLimitDescriptor{desc("ip", "1.2.3.4"), desc("api_key", "k", "sluice_plan", "pro", "sluice_plan", "enterprise")},
			[]string{"two sluice_plan entries", `"pro"`, `"enterprise"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "plans", Descriptors: tt.descs})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want INVALID_ARGUMENT", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("message %q does not say %q", status.Convert(err).Message(), w)
				}
			}
		})
	}
	// Nothing was consumed: the ip counter and api_key k are untouched.
	resp := call(t, c, "plans", desc("ip", "1.2.3.4"), desc("api_key", "k", "sluice_plan", "pro"))
	if r0, r1 := resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining; r0 != 99 || r1 != 4 {
		t.Errorf("after the refused requests: remaining %d and %d, want 99 and 4 (nothing consumed before)", r0, r1)
	}
	// A descriptor that matches no rule is OK, whatever plan it names.
	if resp := call(t, c, "plans", desc("nothing", "x", "sluice_plan", "gold")); resp.OverallCode != ok {
		t.Errorf("no rule, unknown plan: %v, want OK", resp.OverallCode)
	}
}

func TestPlansAllOrNothing(t *testing.T) {
	srv, _ := memoryServer(t, configDir(t, plansAONYAML), envoyrls.Options{})
	c := serve(t, srv)
	descs := func() []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{desc("ip", "9.9.9.9"), desc("api_key", "k", "sluice_plan", "pro")}
	}
	if got := codesOf(t, c, "plans_aon", 6, descs); got != "+++++-" {
		t.Errorf("all_or_nothing with pro: %s, want +++++-", got)
	}
	// The deny consumed nothing in ip: 5 of its 100 are spent.
	if r := call(t, c, "plans_aon", desc("ip", "9.9.9.9")).Statuses[0].LimitRemaining; r != 94 {
		t.Errorf("ip remaining %d after 5 admitted, a deny and this check, want 94", r)
	}
}

// TestPlansTwoInstancesShareRedisExactLimit fires concurrent requests naming
// a plan at two instances on one real Redis: exactly the plan's limit is
// admitted, checked in one step with the domain's other descriptors.
func TestPlansTwoInstancesShareRedisExactLimit(t *testing.T) {
	redis := testenv.Redis(t)
	dir := configDir(t, `
domain: plans_redis
descriptors:
  - key: api_key
    rate_limit: {unit: year, requests_per_unit: 5}
    plans:
      pro:
        rate_limits:
          - {unit: year, requests_per_unit: 40}
          - {unit: day, requests_per_unit: 1000, algorithm: sliding_window}
`, plansAONYAML)
	var clients []rlspb.RateLimitServiceClient
	for range 2 {
		store := openRedis(t, redis.URL())
		clients = append(clients, serve(t, loadedServer(t, dir, envoyrls.Options{Engine: (*observed)(nil).engine(t, store,
			check.Options{Guard: guard.Options{Timeout: 10 * time.Second}})})))
	}
	tests := []struct {
		domain string
		descs  []*ratelimitv3.RateLimitDescriptor
		limit  int64
	}{
		{"plans_redis", []*ratelimitv3.RateLimitDescriptor{desc("api_key", "k", "sluice_plan", "pro")}, 40},
		{"plans_redis", []*ratelimitv3.RateLimitDescriptor{desc("api_key", "free")}, 5},
		{"plans_aon", []*ratelimitv3.RateLimitDescriptor{desc("ip", "x"), desc("sluice_plan", "pro", "api_key", "k")}, 5},
	}
	const workers, perWorker = 20, 10
	for _, tt := range tests {
		t.Run(tt.domain+"/"+tt.descs[len(tt.descs)-1].Entries[0].Value, func(t *testing.T) {
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perWorker {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						resp, err := clients[w%2].ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: tt.domain, Descriptors: tt.descs})
						cancel()
						switch {
						case err != nil:
							failed.Add(1)
							t.Errorf("RPC failed: %v", err)
						case resp.OverallCode == ok:
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if failed.Load() == 0 && admitted.Load() != tt.limit {
				t.Fatalf("admitted %d of %d, want exactly %d", admitted.Load(), workers*perWorker, tt.limit)
			}
		})
	}
}

func TestPlansConfigErrors(t *testing.T) {
	const head = "domain: d\ndescriptors:\n  - key: k\n"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"plans without own limits", head + "    plans:\n      pro:\n        rate_limit: {unit: minute, requests_per_unit: 5}\n",
			[]string{"line 3", "needs a rate_limit", "requests that name no plan"}},
		{"empty plans", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans: {}\n",
			[]string{"plans is empty"}},
		{"plan without limits", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro: {}\n",
			[]string{`plan "pro" has no limits`}},
		{"bad plan name", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      \"Pro Plan\":\n        rate_limit: {unit: minute, requests_per_unit: 5}\n",
			[]string{`plan "Pro Plan"`, "plan name"}},
		{"unknown field in a plan", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limt: {unit: minute, requests_per_unit: 5}\n",
			[]string{"line 7", "rate_limt", "plan's fields"}},
		{"unknown field in a plan's rate_limit", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limit: {unit: minute, requests_per_unit: 5, burts: 3}\n",
			[]string{"burts", "rate_limit's fields"}},
		{"unlimited plan", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limit: {unlimited: true}\n",
			[]string{`plan "pro"`, "unlimited", "above 0"}},
		{"zero plan", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limit: {unit: minute, requests_per_unit: 0}\n",
			[]string{`plan "pro"`, "requests_per_unit"}},
		{"named plan limit", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limit: {unit: minute, requests_per_unit: 5, name: x}\n",
			[]string{`plan "pro"`, "belong to the descriptor"}},
		{"both forms", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limit: {unit: minute, requests_per_unit: 5}\n        rate_limits: [{unit: minute, requests_per_unit: 5}]\n",
			[]string{`plan "pro"`, "rate_limit and rate_limits both"}},
		{"bad unit", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limit: {unit: fortnight, requests_per_unit: 5}\n",
			[]string{`plan "pro"`, "fortnight"}},
		{"same unit twice", head + "    rate_limit: {unit: minute, requests_per_unit: 1}\n    plans:\n      pro:\n        rate_limits: [{unit: minute, requests_per_unit: 5}, {unit: minute, requests_per_unit: 9}]\n",
			[]string{`plan "pro"`, "counts per minute like another entry"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoyrls.ParseDomain("d.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
