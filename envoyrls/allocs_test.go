package envoyrls_test

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/memory"
)

// allocBudget is the most allocations ShouldRateLimit may make for one
// descriptor, not counting what gRPC allocates to decode the request and
// encode the answer.
const allocBudget = 14

// TestShouldRateLimitAllocationBudget holds one-descriptor checks to the
// budget, allowed and denied (from the deny cache): allocations, unlike
// timings, are the same on any machine.
func TestShouldRateLimitAllocationBudget(t *testing.T) {
	srv := allocsServer(t)
	for _, c := range []struct {
		name string
		req  *rlspb.RateLimitRequest
		want rlspb.RateLimitResponse_Code
	}{
		{"allowed", &rlspb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("database", "users")}}, ok},
		{"denied_by_the_deny_cache", &rlspb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("database", "default")}}, over},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.want == over {
				// Spend the whole limit first.
				for range 600 {
					srv.ShouldRateLimit(ctx, c.req)
				}
			}
			resp, err := srv.ShouldRateLimit(ctx, c.req)
			if err != nil || resp.OverallCode != c.want {
				t.Fatalf("%v, %v; want %v", resp, err, c.want)
			}
			allocs := testing.AllocsPerRun(200, func() { srv.ShouldRateLimit(ctx, c.req) })
			t.Logf("%.0f allocations per check (budget %d)", allocs, allocBudget)
			if allocs > allocBudget {
				t.Errorf("%.0f allocations per check, over the budget of %d", allocs, allocBudget)
			}
		})
	}
}

func allocsServer(tb testing.TB) *envoyrls.Server {
	store := memory.New(memory.Options{Clock: newTestClock().Now})
	tb.Cleanup(func() { store.Close() })
	engine := newObserved().engine(tb, store, check.Options{Clock: newTestClock().Now})
	srv := envoyrls.NewServer(envoyrls.Options{Engine: engine})
	cfg, err := envoyrls.LoadDir("testdata/readme")
	if err != nil {
		tb.Fatal(err)
	}
	srv.SetConfig(cfg)
	return srv
}

// BenchmarkShouldRateLimit measures one descriptor through the server,
// without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	srv := allocsServer(b)
	req := &rlspb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("database", "users")}}
	b.ReportAllocs()
	for b.Loop() {
		srv.ShouldRateLimit(context.Background(), req)
	}
}
