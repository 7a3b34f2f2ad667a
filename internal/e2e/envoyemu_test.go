package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/envoyemu"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestEnvoyEmulated puts the binary, run as /bin/ratelimit with ENV's
// variables alone, behind the emulated Envoy (internal/envoyemu), and asks
// over HTTP what envoyproxy/ratelimit's integration scripts ask through a
// real Envoy: Sluice's own examples/envoy (the token budget checked on the
// request and charged on stream done, per-user and per-address
// descriptors), and testdata/envoyemu's bootstrap for the rest
// (descriptors of two headers, a shadow-mode key, replaces, two backends'
// quotas picked by dynamic metadata and charged on stream done, and
// detailed_metric's stats key). Every limit is per hour (per second for
// the example's per-address one): a run crossing the top of the hour
// skips.
func TestEnvoyEmulated(t *testing.T) {
	redis := testenv.Redis(t)
	statsd, err := net.ListenPacket("udp", "127.0.0.1:0")
	mustRun(t, err)
	defer statsd.Close()
	_, statsdPort, _ := net.SplitHostPort(statsd.LocalAddr().String())

	base := t.TempDir()
	config := filepath.Join(base, "runtime/ratelimit/config")
	mustRun(t, os.MkdirAll(config, 0o755))
	copyFile(t, filepath.Join(repoRoot, "examples/envoy/ratelimit/config/edge.yaml"), filepath.Join(config, "edge.yaml"), 0o644)
	copyFile(t, "testdata/envoyemu/behaviours.yaml", filepath.Join(config, "behaviours.yaml"), 0o644)
	p := startRatelimit(t, copyRatelimit(t, base), base, filepath.Join(base, "runtime"), false,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr, "RUNTIME_WATCH_ROOT=false", "RESPONSE_DYNAMIC_METADATA=true",
		"STATSD_HOST=127.0.0.1", "STATSD_PORT="+statsdPort, "STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=100ms")
	hour := time.Now().Unix() / 3600
	t.Cleanup(func() {
		if t.Failed() && time.Now().Unix()/3600 != hour {
			t.Log("the run crossed the top of the hour, where every window starts again: the failures above may be that")
		}
	})

	example := startEmulator(t, filepath.Join(repoRoot, "examples/envoy/envoy.yaml"), map[string]string{
		"0.0.0.0:10000": "127.0.0.1:0", "127.0.0.1:10001": "127.0.0.1:0", "sluice:8081": p.grpcAddr,
	})
	edge := "http://" + example.Addr("edge")
	behaviours := startEmulator(t, "testdata/envoyemu/envoy.yaml", map[string]string{
		"0.0.0.0:10000": "127.0.0.1:0", "127.0.0.1:10001": "127.0.0.1:0", "127.0.0.1:10002": "127.0.0.1:0",
		"127.0.0.1:10003": "127.0.0.1:0", "ratelimit:8081": p.grpcAddr,
	})
	b := "http://" + behaviours.Addr("edge")

	// statuses asks n times and lists the answers' status codes.
	statuses := func(e *envoyemu.Emulator, url string, n int, headers ...string) []int {
		t.Helper()
		var out []int
		for range n {
			out = append(out, emulatedGet(t, e, url, headers...).status)
		}
		return out
	}
	want := func(what string, got []int, want ...int) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}

	t.Run("token_budget_checked_on_request_charged_on_stream_done", func(t *testing.T) {
		// 10,000 tokens an hour; each answer uses 1,200. The ninth request
		// is checked at 9,600 (OK) and charged to 10,800, past the limit:
		// recorded, so the tenth is denied.
		var got []int
		var last emulatedReply
		for range 10 {
			last = emulatedGet(t, example, edge+"/v1/complete", "x-user", "ada")
			got = append(got, last.status)
		}
		want("budget", got, 200, 200, 200, 200, 200, 200, 200, 200, 200, 429)
		if last.header.Get("x-envoy-ratelimited") != "true" || last.header.Get("x-ratelimit-remaining") != "0" {
			t.Errorf("the denial's headers are %v, want x-envoy-ratelimited: true and x-ratelimit-remaining: 0", last.header)
		}
		// Another user's budget is untouched.
		want("another user", statuses(example, edge+"/v1/complete", 1, "x-user", "grace"), 200)
	})

	t.Run("per_user_and_per_address", func(t *testing.T) {
		r := emulatedGet(t, example, edge+"/v1/models", "x-user", "ada")
		limit := r.header.Get("x-ratelimit-limit")
		if r.status != 200 || !strings.Contains(limit, "100;w=60") || !strings.Contains(limit, "20;w=1") {
			t.Errorf("/v1/ answered %d with x-ratelimit-limit %q, want 200 with the per-user (100;w=60) and per-address (20;w=1) policies", r.status, limit)
		}
	})

	t.Run("two_header_descriptors", func(t *testing.T) {
		want("team and user", statuses(behaviours, b+"/team", 4, "x-team", "red", "x-user", "ada"), 200, 200, 200, 429)
		// A header missing: that descriptor is not sent, nothing limits.
		want("team alone", statuses(behaviours, b+"/team", 5, "x-team", "red"), 200, 200, 200, 200, 200)
	})

	t.Run("shadow_mode_key", func(t *testing.T) {
		got := statuses(behaviours, b+"/team", 4, "x-team", "red", "x-probe", "p")
		r := emulatedGet(t, behaviours, b+"/team", "x-team", "red", "x-probe", "p")
		want("shadow", append(got, r.status), 200, 200, 200, 200, 200)
		if rem := r.header.Get("x-ratelimit-remaining"); rem != "0" {
			t.Errorf("past a shadow limit x-ratelimit-remaining is %q, want 0 (over, let through)", rem)
		}
	})

	t.Run("replaces", func(t *testing.T) {
		want("banned", statuses(behaviours, b+"/team", 1, "x-team", "blue", "x-user", "banned"), 429)
		// The partner's limit replaces the ban and per_user: 5, then denied.
		want("banned partner", statuses(behaviours, b+"/team", 6, "x-team", "blue", "x-user", "banned", "x-partner", "acme"),
			200, 200, 200, 200, 200, 429)
		// Without the partner, per_user is as it was.
		want("per_user", statuses(behaviours, b+"/team", 4, "x-team", "blue", "x-user", "bob"), 200, 200, 200, 429)
	})

	t.Run("multiservice_quota", func(t *testing.T) {
		// blue has 1 an hour, green 2, both checked with hits_addend 0 and
		// charged when the stream ends to the backend that served: a
		// request goes to the first backend whose quota is left, and is
		// denied when neither has any.
		var got []string
		for range 6 {
			r := emulatedGet(t, behaviours, b+"/pick")
			got = append(got, fmt.Sprintf("%d %s", r.status, r.body))
		}
		if fmt.Sprint(got) != fmt.Sprint([]string{"200 blue", "200 blue", "200 green", "200 green", "200 green", "429 "}) {
			t.Errorf("/pick answered %q, want blue twice, green three times, then 429", got)
		}
	})

	t.Run("detailed_metric_stats_key", func(t *testing.T) {
		want("client", statuses(behaviours, b+"/client", 3, "x-client", "c1"), 200, 200, 429)
		const name = "ratelimit.service.rate_limit.behaviours.client_c1."
		wantStats := map[string]int{name + "total_hits": 3, name + "within_limit": 2, name + "over_limit": 1}
		got := map[string]int{}
		buf := make([]byte, 65536)
		// A bound for a broken run, not a timing assertion.
		_ = statsd.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			enough := true
			for k, v := range wantStats {
				enough = enough && got[k] >= v
			}
			if enough {
				break
			}
			n, _, err := statsd.ReadFrom(buf)
			if err != nil {
				t.Fatalf("reading statsd: %v; got %v, want %v", err, got, wantStats)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				k, rest, _ := strings.Cut(line, ":")
				if v, ok := strings.CutSuffix(rest, "|c"); ok && strings.HasPrefix(k, name) {
					n, err := strconv.Atoi(v)
					mustRun(t, err)
					got[k] += n
				}
			}
		}
		for k, v := range wantStats {
			if got[k] != v {
				t.Errorf("%s = %d, want %d", k, got[k], v)
			}
		}
	})
}

func startEmulator(t *testing.T, bootstrap string, addrs map[string]string) *envoyemu.Emulator {
	t.Helper()
	b, err := envoyemu.LoadFile(bootstrap)
	mustRun(t, err)
	// The filters' 20 ms (Envoy's default) is short for a loaded machine;
	// a late answer would be a failure, allowed or denied.
	e, err := envoyemu.Start(b, envoyemu.Options{Addrs: addrs, RateLimitTimeout: 10 * time.Second})
	mustRun(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

type emulatedReply struct {
	status int
	header http.Header
	body   string
}

// emulatedGet asks the emulated Envoy, then waits for its charges on
// stream done to be answered, as the next request through a real Envoy
// would find them counted.
func emulatedGet(t *testing.T, e *envoyemu.Emulator, url string, headers ...string) emulatedReply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	mustRun(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Do(req)
	mustRun(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	mustRun(t, err)
	e.Settle()
	return emulatedReply{resp.StatusCode, resp.Header, string(body)}
}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."
