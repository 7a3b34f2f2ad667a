package envoyrls_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func openRedis(t *testing.T, url string) *sluiceredis.Store {
	t.Helper()
	store, err := sluiceredis.Open(url, sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func loadedServer(t *testing.T, dir string, opts envoyrls.Options) *envoyrls.Server {
	t.Helper()
	cfg, err := envoyrls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := envoyrls.NewServer(opts)
	srv.SetConfig(cfg)
	return srv
}

// TestTwoInstancesShareRedisExactLimit runs two server instances, each with
// its own Redis connection and gRPC listener, against one Redis, and fires
// concurrent RPCs at both: exactly the limit is admitted, for every algorithm
// and for an all-or-nothing domain.
func TestTwoInstancesShareRedisExactLimit(t *testing.T) {
	redis := testenv.Redis(t)
	dir := configDir(t, `
domain: strict
descriptors:
  - key: fixed
    rate_limit: {unit: year, requests_per_unit: 50}
  - key: sliding
    rate_limit: {unit: day, requests_per_unit: 50, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: day, requests_per_unit: 50, algorithm: token_bucket}
`, `
domain: strict_aon
all_or_nothing: true
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 50}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 100000}
`)
	var clients []rlspb.RateLimitServiceClient
	for range 2 {
		store := openRedis(t, redis.URL())
		clients = append(clients, serve(t, loadedServer(t, dir, envoyrls.Options{Engine: (*observed)(nil).engine(t, store,
			// Exactness, not deadlines, is under test: the race detector
			// on two shared cores can hold a call past the usual 50ms.
			check.Options{Guard: guard.Options{Timeout: 10 * time.Second}})})))
	}
	tests := []struct {
		name   string
		domain string
		descs  func(i int) []*ratelimitv3.RateLimitDescriptor
	}{
		{"fixed_window", "strict", func(int) []*ratelimitv3.RateLimitDescriptor {
			return []*ratelimitv3.RateLimitDescriptor{desc("fixed", "k")}
		}},
		{"sliding_window", "strict", func(int) []*ratelimitv3.RateLimitDescriptor {
			return []*ratelimitv3.RateLimitDescriptor{desc("sliding", "k")}
		}},
		{"token_bucket", "strict", func(int) []*ratelimitv3.RateLimitDescriptor {
			return []*ratelimitv3.RateLimitDescriptor{desc("bucket", "k")}
		}},
		{"all_or_nothing", "strict_aon", func(i int) []*ratelimitv3.RateLimitDescriptor {
			return []*ratelimitv3.RateLimitDescriptor{desc("user", "k"), desc("ip", string(rune('a'+i%7)))}
		}},
	}
	const workers, perWorker, limit = 20, 10, 50
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := clients[w%2]
					for i := range perWorker {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: tt.domain, Descriptors: tt.descs(w*perWorker + i)})
						cancel()
						switch {
						case err != nil:
							failed.Add(1)
							t.Errorf("RPC failed: %v", err)
						case resp.OverallCode == rlspb.RateLimitResponse_OK:
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if failed.Load() == 0 && admitted.Load() != limit {
				t.Fatalf("admitted %d of %d concurrent requests, want exactly %d", admitted.Load(), workers*perWorker, limit)
			}
		})
	}
}

// TestStoreDown stops Redis and checks each failure policy: the guard's
// deadline and breaker make every answer quick.
func TestStoreDown(t *testing.T) {
	redis := testenv.Redis(t)
	dir := configDir(t, `
domain: open
failure_mode: open
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`, `
domain: default
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: closed}
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 2, failure_mode: local}
`)
	store := openRedis(t, redis.URL())
	obs := newObserved()
	g := obs.engine(t, store, check.Options{Guard: guard.Options{Timeout: 50 * time.Millisecond}})
	c := serve(t, loadedServer(t, dir, envoyrls.Options{Engine: g}))
	if r := call(t, c, "open", desc("user", "u")); r.OverallCode != ok {
		t.Fatalf("with Redis up: %v", r.OverallCode)
	}
	redis.Stop()
	// The first call may itself have missed the deadline on a loaded
	// machine (and been decided by the policy): count from here.
	before := obs.count("user", "degraded")

	ask := func(domain string, d *ratelimitv3.RateLimitDescriptor) (*rlspb.RateLimitResponse, error) {
		// Far longer than the guard's deadline: an answer must come from
		// the policy, not from a timeout here.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	}
	for i := range 10 {
		r, err := ask("open", desc("user", "u"))
		if err != nil || r.OverallCode != ok {
			t.Fatalf("fail-open call %d: %v, %v", i+1, r, err)
		}
	}
	if n := obs.count("user", "degraded") - before; n != 10 {
		t.Errorf("degraded decisions = %d, want 10", n)
	}
	// No failure_mode: Envoy gets UNAVAILABLE and applies its own
	// failure_mode_deny, as with envoyproxy/ratelimit.
	if _, err := ask("default", desc("user", "u")); status.Code(err) != codes.Unavailable {
		t.Errorf("default policy: %v, want UNAVAILABLE", err)
	}
	if r, err := ask("default", desc("closed", "u")); err != nil || r.OverallCode != over {
		t.Errorf("closed policy: %v, %v; want OVER_LIMIT", r, err)
	}
	var local []rlspb.RateLimitResponse_Code
	for range 3 {
		r, err := ask("default", desc("local", "u"))
		if err != nil {
			t.Fatalf("local policy: %v", err)
		}
		local = append(local, r.OverallCode)
	}
	if local[0] != ok || local[1] != ok || local[2] != over {
		t.Errorf("local policy with a limit of 2: %v", local)
	}
}

// countingStore counts the checks that reach a real store.
type countingStore struct {
	sluice.Store
	checks atomic.Int64
}

func (c *countingStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	c.checks.Add(1)
	return c.Store.Check(ctx, req)
}

// TestHungStoreOpensBreaker freezes Redis (it accepts connections but answers
// nothing, the case where envoyproxy/ratelimit makes every request wait out
// its timeout): once the breaker opens, checks no longer reach the store and
// every answer comes from the failure policy, for descriptors checked one by
// one and for an all-or-nothing domain.
func TestHungStoreOpensBreaker(t *testing.T) {
	redis := testenv.Redis(t)
	dir := configDir(t, `
domain: open
failure_mode: open
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`, `
domain: aon
all_or_nothing: true
failure_mode: closed
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	store := &countingStore{Store: openRedis(t, redis.URL())}
	const threshold = 3
	// The breaker stays open for the whole test: no probe reaches the store.
	g := (*observed)(nil).engine(t, store, check.Options{Guard: guard.Options{Timeout: 100 * time.Millisecond, FailureThreshold: threshold, OpenTimeout: time.Hour}})
	c := serve(t, loadedServer(t, dir, envoyrls.Options{Engine: g}))
	if r := call(t, c, "open", desc("user", "u")); r.OverallCode != ok {
		t.Fatalf("with Redis up: %v", r.OverallCode)
	}
	redis.Pause()
	t.Cleanup(redis.Resume)
	before := store.checks.Load()
	for i := range 20 {
		if r := call(t, c, "open", desc("user", "u"), desc("user", "v")); r.OverallCode != ok {
			t.Fatalf("fail-open call %d: %v", i+1, r.OverallCode)
		}
		if r := call(t, c, "aon", desc("user", "u"), desc("ip", "i")); r.OverallCode != over {
			t.Fatalf("fail-closed all-or-nothing call %d: %v", i+1, r.OverallCode)
		}
	}
	if g.BreakerState() != "open" {
		t.Fatalf("breaker %s after 60 checks against a frozen store", g.BreakerState())
	}
	// The two descriptors of the first call run concurrently, so up to one
	// more than the threshold may be in flight when the breaker opens.
	// At least threshold failures opened it.
	if n := store.checks.Load() - before; n < threshold || n > threshold+1 {
		t.Fatalf("%d checks reached the frozen store, want %d or %d: the breaker opened without its failures, or did not spare the rest the timeout", n, threshold, threshold+1)
	}
}

// TestStoreDownKeepsDecidedDeny: a request that a descriptor denies without
// the store (a blocked value) stays OVER_LIMIT when Redis is down and the
// other descriptors' rules have no failure_mode, rather than becoming an
// UNAVAILABLE error that Envoy lets through by default.
func TestStoreDownKeepsDecidedDeny(t *testing.T) {
	redis := testenv.Redis(t)
	const rules = `
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: ip
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	dir := configDir(t, "domain: each\n"+rules, "domain: aon\nall_or_nothing: true\n"+rules)
	store := openRedis(t, redis.URL())
	g := (*observed)(nil).engine(t, store, check.Options{Guard: guard.Options{Timeout: 50 * time.Millisecond}})
	c := serve(t, loadedServer(t, dir, envoyrls.Options{Engine: g}))
	redis.Stop()
	for _, domain := range []string{"each", "aon"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("user", "u"), desc("ip", "50.0.0.5"),
		}})
		cancel()
		if err != nil || r.OverallCode != over || r.Statuses[1].Code != over {
			t.Fatalf("%s: blocked IP with Redis down: %v, %v; want OVER_LIMIT", domain, r, err)
		}
		if r.Statuses[0].Code != rlspb.RateLimitResponse_UNKNOWN {
			t.Errorf("%s: the undecidable descriptor answered %v, want UNKNOWN", domain, r.Statuses[0].Code)
		}
		// Nothing decided without the store: still UNAVAILABLE, for Envoy's
		// failure_mode_deny to decide.
		_, err = c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("user", "u"), desc("ip", "10.0.0.1"),
		}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: no decided deny, Redis down: %v, want UNAVAILABLE", domain, err)
		}
	}
}
