package envoyrls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestRatelimitKeysBatchedExactly: concurrent checks under
// envoyproxy/ratelimit's keys share script calls (fewer calls than checks
// reach Redis), admit exactly the limit, and leave the window's key at the
// limit with an expiry.
func TestRatelimitKeysBatchedExactly(t *testing.T) {
	redis := testenv.Redis(t)
	const limit, callers, each = 500, 64, 20
	config := fmt.Sprintf("domain: api\ndescriptors:\n  - key: hot\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", limit)
	srv, client := ratelimitKeyServer(t, redis.URL(), config, envoyrls.Options{})
	ctx := context.Background()
	if err := client.Do(ctx, client.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	window := time.Now().Unix() / 3600
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "hot", Value: "k"}}}}}
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range each {
				resp, err := srv.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlspb.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if time.Now().Unix()/3600 != window {
		t.Skip("crossed an hour boundary: the counts span two windows")
	}
	if got := ok.Load(); got != limit {
		t.Fatalf("%d of %d checks admitted; want exactly the limit, %d", got, callers*each, limit)
	}
	key := fmt.Sprintf("rl_api_hot_k_%d", window*3600)
	if n, err := client.Do(ctx, client.B().Get().Key(key).Build()).AsInt64(); err != nil || n != limit {
		t.Fatalf("%s = %d, %v; want %d", key, n, err, limit)
	}
	if ttl, err := client.Do(ctx, client.B().Ttl().Key(key).Build()).AsInt64(); err != nil || ttl <= 0 || ttl > 3600 {
		t.Fatalf("TTL %s = %d, %v; want within the hour", key, ttl, err)
	}
	info, err := client.Do(ctx, client.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, found := strings.CutPrefix(line, cmd); found {
				var n int
				fmt.Sscanf(rest, "%d", &n)
				calls += n
			}
		}
	}
	// The deny cache answers most denies without Redis; the checks that
	// reached it are at least the limit's.
	t.Logf("%d script calls for %d checks", calls, callers*each)
	if calls == 0 || calls >= limit {
		t.Fatalf("%d script calls; want fewer than the %d admitted checks, from batches", calls, limit)
	}
}
