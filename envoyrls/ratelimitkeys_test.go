package envoyrls_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

const ratelimitKeysConfig = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: "/v1*"
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token_bucket}
`

// TestRatelimitKeyFormat: with RatelimitKeys, default fixed windows are
// counted in Redis under envoyproxy/ratelimit's keys (prefix, domain,
// key_value_ per entry, window start), so hits counted there by
// envoyproxy/ratelimit (INCRBY on the same key) count here too; a deny
// consumes nothing; Sluice's extensions keep Sluice's keys. The keys carry
// no hash tag, and work on a Redis Cluster too.
func TestRatelimitKeyFormat(t *testing.T) {
	t.Run("single", func(t *testing.T) { testRatelimitKeyFormat(t, testenv.Redis(t).URL()) })
	t.Run("cluster", func(t *testing.T) { testRatelimitKeyFormat(t, testenv.RedisCluster(t).URL()) })
}

func testRatelimitKeyFormat(t *testing.T, redisURL string) {
	rs, err := sluiceredis.Open(redisURL, sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	opts, err := sluiceredis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rueidis.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	engine := check.New(envoyrls.NewRatelimitKeyStore(rs, client, "rl_"), check.Options{})
	t.Cleanup(func() { engine.Close() })
	srv := envoyrls.NewServer(envoyrls.Options{Engine: engine, RatelimitKeys: true})
	cfg, err := envoyrls.LoadDir(configDir(t, ratelimitKeysConfig))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetConfig(cfg)
	// do sends one command as envoyproxy/ratelimit (or an operator) would,
	// routed to the key's node on a cluster.
	do := func(args ...string) string {
		t.Helper()
		v, err := client.Do(context.Background(), client.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build()).ToAny()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("%v: %v", args, err)
		}
		return fmt.Sprint(v)
	}

	call := func(key, value string) rlspb.RateLimitResponse_Code {
		t.Helper()
		resp, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	get := func(key string) string {
		t.Helper()
		return do("GET", key)
	}
	// windowKey is envoyproxy/ratelimit's key of a descriptor for the
	// current window; the test skips in the rare run that crosses a window
	// boundary between two readings, rather than guess the window.
	windowKey := func(descriptor string, unit int64) string {
		return "rl_api_" + descriptor + "_" + strconv.FormatInt(time.Now().Unix()/unit*unit, 10)
	}
	stable := func(descriptor string, unit int64, step func()) string {
		t.Helper()
		before := windowKey(descriptor, unit)
		step()
		if after := windowKey(descriptor, unit); after != before {
			t.Skipf("crossed a window boundary (%s, %s)", before, after)
		}
		return before
	}

	key := stable("user_u1", 3600, func() {
		if call("user", "u1") != rlspb.RateLimitResponse_OK {
			t.Fatal("the first request was denied")
		}
	})
	if got := get(key); got != "1" {
		t.Fatalf("%s = %q after one request, want 1", key, got)
	}
	if ttl, _ := strconv.Atoi(do("TTL", key)); ttl <= 0 || ttl > 3600 {
		t.Fatalf("TTL %s = %d; want within the hour", key, ttl)
	}

	// envoyproxy/ratelimit counts two requests of its own on the same key.
	do("INCRBY", key, "2")
	stable("user_u1", 3600, func() {
		if call("user", "u1") != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatal("3 of 3 counted between the two services, yet a fourth request was admitted")
		}
	})
	if got := get(key); got != "3" {
		t.Fatalf("%s = %q after a deny, want still 3: a deny consumes nothing", key, got)
	}

	// share_threshold: every value of the wildcard shares the pattern's key.
	key = stable("path_/v1*", 86400, func() {
		for _, v := range []string{"/v1/a", "/v1/b"} {
			if call("path", v) != rlspb.RateLimitResponse_OK {
				t.Fatalf("path %s denied", v)
			}
		}
		if call("path", "/v1/c") != rlspb.RateLimitResponse_OVER_LIMIT {
			t.Fatal("a third value of the shared wildcard was admitted")
		}
	})
	if got := get(key); got != "2" {
		t.Fatalf("%s = %q, want 2", key, got)
	}

	// A token bucket is Sluice's own: no envoyproxy/ratelimit key.
	if call("bucket", "b1") != rlspb.RateLimitResponse_OK {
		t.Fatal("token bucket denied")
	}
	if n := do("EXISTS", windowKey("bucket_b1", 3600)); n != "0" {
		t.Fatalf("a token bucket made an envoyproxy/ratelimit key (EXISTS %s)", n)
	}
}

func TestCheckKeyFormat(t *testing.T) {
	for _, c := range []struct {
		format, prefix string
		redis          bool
		want           string
	}{
		{"", "", false, ""},
		{envoyrls.KeyFormatSluice, "", false, ""},
		{envoyrls.KeyFormatRatelimit, "rl_", true, ""},
		{envoyrls.KeyFormatRatelimit, "", false, "set --redis too"},
		{"envoy", "", true, `--envoy-key-format "envoy" is not a key format`},
		{envoyrls.KeyFormatSluice, "rl_", true, "--envoy-key-prefix applies to --envoy-key-format ratelimit only"},
	} {
		err := envoyrls.CheckKeyFormat(c.format, c.prefix, c.redis)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: error %v, want %q", c, err, c.want)
		}
	}
}
