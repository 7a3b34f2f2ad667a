package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Allocation budgets of one allowed check end to end: the sluice binary
// (built without -race, so sync.Pool behaves as in production) serving a
// real client over the loopback, on a real Redis, counted by the server's
// own go_memstats_mallocs_total. They include what grpc-go and net/http
// allocate per request, which is most of it (see BENCHMARKS.md); a budget
// is the measured figure with a little headroom, so a regression of a few
// allocations per check fails here while timings could not.
const (
	grpcAllocBudget = 90
	httpAllocBudget = 46
)

// TestAllocationsPerCheckEndToEnd counts the server's allocations per
// allowed check over gRPC (ShouldRateLimit) and HTTP (POST /v1/check).
// Allocations, unlike timings, do not depend on the machine's load; the
// little that the server's own background work allocates is kept out by
// taking the smallest of several rounds.
func TestAllocationsPerCheckEndToEnd(t *testing.T) {
	config := t.TempDir()
	writeFile(t, filepath.Join(config, "allocs.yaml"), `
domain: allocs
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100000000}
`)
	grpcAddr := freeAddr(t)
	inst, _ := startProduction(t, 1, "--grpc-addr", grpcAddr, "--envoy-config", config)
	in := inst[0]
	key := setupTenant(in, adminToken, "acme")
	in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/search", adminToken, map[string]any{
		"route":  "/v1/search*",
		"limits": []any{map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 100000000, "window": "1h"}},
	})
	waitForRule(t, in, key, "/v1/search", "search")

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	mustRun(t, err)
	t.Cleanup(func() { conn.Close() })
	rls := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "allocs", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}}
	grpcCheck := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err == nil && resp.OverallCode != rlspb.RateLimitResponse_OK {
			err = fmt.Errorf("answer %v, want OK", resp.OverallCode)
		}
		return err
	}
	body := `{"route":"/v1/search","subject":"alice"}`
	httpCheck := func() error {
		hreq, err := http.NewRequest("POST", in.url+"/v1/check", strings.NewReader(body))
		if err != nil {
			return err
		}
		hreq.Header.Set("Authorization", "Bearer "+key)
		hreq.Header.Set("Content-Type", "application/json")
		resp, err := in.client.Do(hreq)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d, want 200", resp.StatusCode)
		}
		return nil
	}
	for _, c := range []struct {
		name   string
		check  func() error
		budget float64
	}{
		{"grpc", grpcCheck, grpcAllocBudget},
		{"http", httpCheck, httpAllocBudget},
	} {
		t.Run(c.name, func(t *testing.T) {
			per := allocsPerCheck(t, in, c.check)
			t.Logf("%.1f allocations per check in the server (budget %.0f)", per, c.budget)
			if per > c.budget {
				t.Errorf("%.1f allocations per check in the server, over the budget of %.0f", per, c.budget)
			}
		})
	}
}

// allocsPerCheck returns the fewest server allocations per check over a
// few rounds of sequential checks. Each round's figure has taken out the
// cost of one /metrics scrape (a scrape with no check between, just before)
// and what the server allocates on its own meanwhile (its rate over an idle
// half second just after, times the round's length): on a loaded machine a
// round lasts longer, and that background work would count per check.
func allocsPerCheck(t *testing.T, in *instance, check func() error) float64 {
	t.Helper()
	const checks, rounds = 3000, 4
	const idle = 500 * time.Millisecond
	// Warm up: connections, pools and the rule's counters exist.
	for range 500 {
		mustRun(t, check())
	}
	best := -1.0
	for range rounds {
		m0 := serverMallocs(t, in)
		m1 := serverMallocs(t, in)
		scrape := m1 - m0
		start := time.Now()
		for range checks {
			mustRun(t, check())
		}
		took := time.Since(start)
		m2 := serverMallocs(t, in)
		time.Sleep(idle)
		m3 := serverMallocs(t, in)
		background := max(0, float64(m3-m2-scrape)) * float64(took) / float64(idle)
		per := (float64(m2-m1-scrape) - background) / checks
		if best < 0 || per < best {
			best = per
		}
	}
	return best
}

// serverMallocs scrapes the server's go_memstats_mallocs_total.
func serverMallocs(t *testing.T, in *instance) int64 {
	t.Helper()
	r := in.must(http.StatusOK, "GET", "/metrics", adminToken, nil)
	for line := range strings.Lines(r.raw) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go_memstats_mallocs_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			mustRun(t, err)
			return int64(f)
		}
	}
	t.Fatalf("no go_memstats_mallocs_total in /metrics:\n%.2000s", r.raw)
	return 0
}
