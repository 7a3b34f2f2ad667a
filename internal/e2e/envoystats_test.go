package e2e

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// statsDomainYAML is the configuration of the stats runs: 2 a day, so a
// run crosses no window but at midnight (and then skips).
const statsDomainYAML = `domain: e2estats
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2}
`

// startStatsEnvMode runs the binary as /bin/ratelimit with env among ENV's
// variables, sends three hits to e2estats' rule (two within, the third
// over), and returns a stop that SIGTERMs it and wants exit 0.
func startStatsEnvMode(t *testing.T, env ...string) (httpAddr string, stop func()) {
	t.Helper()
	base := t.TempDir()
	mustRun(t, os.MkdirAll(filepath.Join(base, "runtime/ratelimit/config"), 0o755))
	writeFile(t, filepath.Join(base, "runtime/ratelimit/config/stats.yaml"), statsDomainYAML)
	p := startRatelimit(t, copyRatelimit(t, base), base, filepath.Join(base, "runtime"), false, env...)
	httpAddr = p.httpAddr
	client := &http.Client{Timeout: 10 * time.Second}
	day := time.Now().UTC().YearDay()
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		body := `{"domain":"e2estats","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`
		resp, err := client.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
		mustRun(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(raw), `"overallCode":"`+want+`"`) {
			if time.Now().UTC().YearDay() != day {
				t.Skip("crossed midnight; the window started again")
			}
			t.Fatalf("request %d: %s, want %s", i+1, raw, want)
		}
	}
	return httpAddr, p.stop
}

// TestEnvoyModeStatsd: as /bin/ratelimit with ENV's statsd variables (and
// USE_STATSD left to its default, true), the stats arrive on a real UDP
// listener under ENV's names, tagged with EXTRA_TAGS, counted as ENV's
// base limiter counts: of three hits on a limit of 2 (near threshold
// floor(2*0.8) = 1), two within, the second near, the third over.
func TestEnvoyModeStatsd(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	mustRun(t, err)
	defer conn.Close()
	_, port, _ := net.SplitHostPort(conn.LocalAddr().String())
	_, stop := startStatsEnvMode(t, "STATSD_HOST=127.0.0.1", "STATSD_PORT="+port, "STATSD_PROTOCOL=udp",
		"STATS_FLUSH_INTERVAL=100ms", "EXTRA_TAGS=cluster:e2e")
	const tag = ".__cluster=e2e"
	want := map[string]int{
		"ratelimit.service.rate_limit.e2estats.user.total_hits" + tag:   3,
		"ratelimit.service.rate_limit.e2estats.user.within_limit" + tag: 2,
		"ratelimit.service.rate_limit.e2estats.user.near_limit" + tag:   1,
		"ratelimit.service.rate_limit.e2estats.user.over_limit" + tag:   1,
		"ratelimit.service.config_load_success" + tag:                   1,
		"ratelimit_server.ShouldRateLimit.total_requests" + tag:         3,
	}
	got := map[string]int{}
	done := func() bool {
		for name, v := range want {
			if got[name] < v {
				return false
			}
		}
		return true
	}
	buf := make([]byte, 65536)
	// A bound for a broken run, not a timing assertion.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for !done() {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("reading statsd: %v; got %v, want %v", err, got, want)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
			name, rest, _ := strings.Cut(line, ":")
			if value, ok := strings.CutSuffix(rest, "|c"); ok {
				v, err := strconv.Atoi(value)
				mustRun(t, err)
				got[name] += v // each flush sends what was counted since the last
			}
		}
	}
	stop()
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %d, want %d", name, got[name], v)
		}
	}
}

// TestEnvoyModePrometheus: with USE_PROMETHEUS (and USE_STATSD=false, as
// ENV asks), ENV's series are served on PROMETHEUS_ADDR at PROMETHEUS_PATH,
// by ENV's default mapping; ENV's HTTP port still serves no /metrics.
func TestEnvoyModePrometheus(t *testing.T) {
	promAddr := freeAddr(t)
	httpAddr, stop := startStatsEnvMode(t, "USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR="+promAddr,
		"PROMETHEUS_PATH=/stats", "STATS_FLUSH_INTERVAL=100ms")
	defer stop()
	want := []string{
		`ratelimit_service_rate_limit_total_hits{domain="e2estats",key1="user"} 3`,
		`ratelimit_service_rate_limit_within_limit{domain="e2estats",key1="user"} 2`,
		`ratelimit_service_rate_limit_near_limit{domain="e2estats",key1="user"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="e2estats",key1="user"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 3`,
		`ratelimit_service_config_load_success 1`,
	}
	var page string
	testenv.Eventually(t, 30*time.Second, "the Prometheus series", func() bool {
		resp, err := http.Get("http://" + promAddr + "/stats")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		for _, w := range want {
			if !strings.Contains("\n"+page, "\n"+w+"\n") {
				return false
			}
		}
		return true
	})
	if strings.Contains(page, "sluice_") {
		t.Errorf("Sluice's own series are on PROMETHEUS_ADDR:\n%s", page)
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	mustRun(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on ENV's HTTP port: %d, want 404", resp.StatusCode)
	}
}
