package envoyrls_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/memory"
)

// statsYAML is the configuration of the stats tests: one rule per case of
// envoyproxy/ratelimit's base limiter.
const statsYAML = `domain: stats
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k1
    value: v1
    descriptors:
      - key: k2
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: unl
    rate_limit: {unlimited: true}
  - key: detail
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

const brokenYAML = `domain: broken
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// downStore fails every check of tenant "envoy:broken".
type downStore struct{ sluice.Store }

func (s downStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	if req.Tenant == "envoy:broken" {
		return sluice.Decision{}, sluice.ErrStoreUnavailable
	}
	return s.Store.Check(ctx, req)
}

// statsServer is a server counting into stats, on a memory store whose
// domain "broken" is always down.
func statsServer(t *testing.T, stats *envoyrls.EnvStats) *envoyrls.Server {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"stats.yaml": statsYAML, "broken.yaml": brokenYAML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clock := newTestClock()
	store := memory.New(memory.Options{Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	engine := (*observed)(nil).engine(t, downStore{store}, check.Options{Clock: clock.Now})
	srv := envoyrls.NewServer(envoyrls.Options{Engine: engine, Clock: clock.Now, Stats: stats})
	cfg, err := envoyrls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetConfig(cfg)
	return srv
}

// statsSequence is a known sequence of calls; it returns how many calls it
// made.
func statsSequence(t *testing.T, srv *envoyrls.Server) int {
	t.Helper()
	calls := 0
	ask := func(domain string, want codes.Code, descs ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		calls++
		resp, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
		if status.Code(err) != want {
			t.Fatalf("call %d (%s %v): %v, want %v", calls, domain, descs, err, want)
		}
		return resp
	}
	expect := func(domain string, code rlspb.RateLimitResponse_Code, descs ...*ratelimitv3.RateLimitDescriptor) {
		t.Helper()
		if r := ask(domain, codes.OK, descs...); r.GetOverallCode() != code {
			t.Fatalf("call %d (%s %v): %v, want %v", calls, domain, descs, r.GetOverallCode(), code)
		}
	}
	for range 7 {
		expect("stats", ok, desc("user", "u"))
	}
	expect("stats", ok, withHits(desc("user", "u"), 2))   // 7 -> 9
	expect("stats", over, withHits(desc("user", "u"), 3)) // 9 + 3 > 10
	for range 2 {
		expect("stats", ok, desc("small", "s"))
	}
	expect("stats", over, desc("small", "s")) // the store denies
	expect("stats", over, desc("small", "s")) // the deny cache denies
	expect("stats", ok, desc("shadow", "x"))
	expect("stats", ok, desc("shadow", "x")) // over, let through
	expect("stats", ok, desc("k1", "v1", "k2", "z"))
	expect("stats", ok, desc("remote_address", "10.0.0.1"))
	expect("stats", ok, desc("unl", "x"))
	expect("stats", ok, desc("detail", "d1"))
	expect("stats", over, desc("detail", "d1"))
	expect("stats", ok, desc("detail", "d2"))
	for _, want := range []rlspb.RateLimitResponse_Code{ok, over} {
		d := desc("ov", "a")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
		expect("stats", want, d)
	}
	ask("nope", codes.OK, desc("a", "b"), desc("c", "d"))
	ask("", codes.InvalidArgument, desc("a", "b"))
	ask("broken", codes.Unavailable, desc("user", "u"))
	return calls
}

// wantRuleStats are the counters envoyproxy/ratelimit's base limiter
// (src/limiter/base_limiter.go, NEAR_LIMIT_RATIO 0.8, a local cache)
// counts for statsSequence, worked out from its code:
//
//	user, limit 10, near threshold floor(10*0.8) = 8: seven hits of 1 end
//	at 7, within; a hit of 2 goes 7 -> 9, within 2 and near 9-8 = 1; a hit
//	of 3 goes 9 -> 12, over: as 9 < 10, over 12-10 = 2 and near
//	10-max(8,9) = 1.
//	small, limit 2, near threshold 1: 1 within; 1 -> 2 within and near
//	(before 1 >= 1, all of the hit); 2 -> 3 over (before 2 >= 2, all of
//	it); then the local cache: over and over_limit_with_local_cache.
//	shadow, limit 1, near threshold 0: 0 -> 1 within and near; 1 -> 2 over
//	and shadow_mode, answered OK.
//	k1_v1.k2 and remote_address_10_0_0_1 (an IPv4 address sanitised):
//	one hit within each.
//	detail (detailed_metric), limit 1, near threshold 0, under each
//	request's key and value: detail_d1 0 -> 1 within and near, 1 -> 2
//	over; detail_d2 0 -> 1 within and near.
//	ov_a, a limit override of 1 a minute, under its descriptor's key: 0 -> 1
//	within and near (threshold 0), 1 -> 2 over.
var wantRuleStats = map[string]int{
	"stats.user.total_hits":                      12,
	"stats.user.within_limit":                    9,
	"stats.user.near_limit":                      2,
	"stats.user.over_limit":                      2,
	"stats.small.total_hits":                     4,
	"stats.small.within_limit":                   2,
	"stats.small.near_limit":                     1,
	"stats.small.over_limit":                     2,
	"stats.small.over_limit_with_local_cache":    1,
	"stats.shadow.total_hits":                    2,
	"stats.shadow.within_limit":                  1,
	"stats.shadow.near_limit":                    1,
	"stats.shadow.over_limit":                    1,
	"stats.shadow.shadow_mode":                   1,
	"stats.k1_v1.k2.total_hits":                  1,
	"stats.k1_v1.k2.within_limit":                1,
	"stats.remote_address_10_0_0_1.total_hits":   1,
	"stats.remote_address_10_0_0_1.within_limit": 1,
	"stats.detail_d1.total_hits":                 2,
	"stats.detail_d1.within_limit":               1,
	"stats.detail_d1.near_limit":                 1,
	"stats.detail_d1.over_limit":                 1,
	"stats.detail_d2.total_hits":                 1,
	"stats.detail_d2.within_limit":               1,
	"stats.detail_d2.near_limit":                 1,
	"stats.ov_a.total_hits":                      2,
	"stats.ov_a.within_limit":                    1,
	"stats.ov_a.near_limit":                      1,
	"stats.ov_a.over_limit":                      1,
	"nope.domain_not_found":                      2,
	// Counted before the store is asked, as there.
	"broken.user.total_hits": 1,
}

// TestEnvStatsStatsd sends a known sequence of calls and reads the stats
// off a real UDP listener: envoyproxy/ratelimit's names, with its values,
// in gostats' line format with EXTRA_TAGS' tags.
func TestEnvStatsStatsd(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stats, err := envoyrls.NewEnvStats(envoyrls.EnvStatsOptions{
		StatsdAddr:    conn.LocalAddr().String(),
		FlushInterval: time.Hour, // flushed by hand below
		Tags:          map[string]string{"cluster": "east"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	srv := statsServer(t, stats)
	calls := statsSequence(t, srv)

	want := map[string]int{}
	for name, v := range wantRuleStats {
		want["ratelimit.service.rate_limit."+name] = v
	}
	want["ratelimit.service.config_load_success"] = 1
	want["ratelimit.service.call.should_rate_limit.service_error"] = 1
	want["ratelimit.service.call.should_rate_limit.redis_error"] = 1
	want["ratelimit_server.ShouldRateLimit.total_requests"] = calls
	stats.Flush()

	got := map[string]int{}
	timers := 0
	missing := func() []string {
		var m []string
		for name := range want {
			if _, ok := got[name]; !ok {
				m = append(m, name)
			}
		}
		return m
	}
	buf := make([]byte, 65536)
	// A bound for a broken test, not a timing assertion: every stat of the
	// flush is read before the test looks.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for len(missing()) > 0 || timers < calls {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("reading statsd: %v; still missing %v, %d of %d timers", err, missing(), timers, calls)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
			name, rest, ok := strings.Cut(line, ":")
			value, kind, ok2 := strings.Cut(rest, "|")
			if !ok || !ok2 {
				t.Fatalf("line %q is not name:value|type", line)
			}
			name, ok = strings.CutSuffix(name, ".__cluster=east")
			if !ok {
				t.Errorf("stat %q lacks the tag .__cluster=east", name)
			}
			v, err := strconv.Atoi(value)
			if err != nil {
				t.Fatalf("line %q: value %v", line, err)
			}
			switch kind {
			case "c":
				got[name] += v
			case "ms":
				if name != "ratelimit_server.ShouldRateLimit.response_time" {
					t.Errorf("timer %q, want only ratelimit_server.ShouldRateLimit.response_time", name)
				}
				timers++
			default:
				t.Errorf("line %q: type %q, want c or ms", line, kind)
			}
		}
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %d, want %d", name, got[name], v)
		}
	}
	for name, v := range got {
		if _, ok := want[name]; !ok && v != 0 {
			t.Errorf("unexpected %s = %d", name, v)
		}
	}
	if timers != calls {
		t.Errorf("%d response_time timings, want one per call (%d)", timers, calls)
	}
}

// TestEnvStatsCountsDeltas: a flush sends what was counted since the last
// one, as gostats does, so statsd sums them.
func TestEnvStatsCountsDeltas(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stats, err := envoyrls.NewEnvStats(envoyrls.EnvStatsOptions{StatsdAddr: conn.LocalAddr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	srv := statsServer(t, stats)
	read := func(want string) {
		t.Helper()
		stats.Flush()
		buf := make([]byte, 65536)
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				t.Fatalf("no %q: %v", want, err)
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if strings.HasPrefix(line, "ratelimit.service.rate_limit.stats.user.total_hits:") {
					if line != want {
						t.Fatalf("%q, want %q", line, want)
					}
					return
				}
			}
		}
	}
	for _, hits := range []uint64{3, 4} {
		if _, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "stats", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("user", "u"), hits)}}); err != nil {
			t.Fatal(err)
		}
		read("ratelimit.service.rate_limit.stats.user.total_hits:" + strconv.FormatUint(hits, 10) + "|c")
	}
}

// scrape polls the Prometheus listener until every wanted line is there
// (the exporter takes the flushed stats asynchronously), and returns the
// last page.
func scrape(t *testing.T, url string, want ...string) string {
	t.Helper()
	var page string
	// A bound for a broken test, not a timing assertion.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
		}
		page = string(b)
		var missing []string
		for _, w := range want {
			if !hasLine(page, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s lacks %q; got:\n%s", url, missing, page)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasLine(page, line string) bool {
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}

// TestEnvStatsPrometheus scrapes the series envoyproxy/ratelimit's
// Prometheus mode serves for the known sequence: its default mapping's
// names and labels (domain, key1, key2, err_type, grpc_method), and the
// unmapped stats under their statsd names.
func TestEnvStatsPrometheus(t *testing.T) {
	stats, err := envoyrls.NewEnvStats(envoyrls.EnvStatsOptions{PrometheusAddr: "127.0.0.1:0", PrometheusPath: "/prom", FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	srv := statsServer(t, stats)
	calls := statsSequence(t, srv)
	stats.Flush()
	url := "http://" + stats.PrometheusAddr() + "/prom"
	page := scrape(t, url,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="user"} 12`,
		`ratelimit_service_rate_limit_within_limit{domain="stats",key1="user"} 9`,
		`ratelimit_service_rate_limit_near_limit{domain="stats",key1="user"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="stats",key1="user"} 2`,
		`ratelimit_service_rate_limit_shadow_mode{domain="stats",key1="shadow"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="k1_v1",key2="k2"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="stats",key1="remote_address_10_0_0_1"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="stats",key1="ov_a"} 1`,
		`ratelimit_service_rate_limit_stats_small_over_limit_with_local_cache 1`,
		`ratelimit_service_rate_limit_nope_domain_not_found 2`,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"} 1`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} `+strconv.Itoa(calls),
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} `+strconv.Itoa(calls),
		`ratelimit_service_config_load_success 1`,
	)
	for _, absent := range []string{"sluice_", "ratelimit_service_rate_limit_stats_unl"} {
		if strings.Contains(page, absent) {
			t.Errorf("the page has %q; Sluice's own series stay on its metrics listener, unlimited rules count nothing", absent)
		}
	}
	resp, err := http.Get("http://" + stats.PrometheusAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics with PROMETHEUS_PATH /prom: %d, want 404", resp.StatusCode)
	}
}

// TestEnvStatsPrometheusMapperFile: PROMETHEUS_MAPPER_YAML replaces the
// default mapping whole: its series appear, the default's do not.
func TestEnvStatsPrometheusMapperFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mapper.yaml")
	mapping := `mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "team_hits"
    labels:
      service: "$1"
      rule: "$2"
`
	if err := os.WriteFile(file, []byte(mapping), 0o644); err != nil {
		t.Fatal(err)
	}
	stats, err := envoyrls.NewEnvStats(envoyrls.EnvStatsOptions{PrometheusAddr: "127.0.0.1:0", PrometheusMapper: file, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	srv := statsServer(t, stats)
	statsSequence(t, srv)
	stats.Flush()
	page := scrape(t, "http://"+stats.PrometheusAddr()+"/metrics",
		`team_hits{rule="user",service="stats"} 12`,
		`ratelimit_service_rate_limit_stats_user_within_limit 9`,
		`ratelimit_service_config_load_success 1`,
	)
	if strings.Contains(page, "ratelimit_service_rate_limit_total_hits") {
		t.Errorf("the default mapping still applies beside the file's:\n%s", page)
	}
}

// TestEnvStatsRefusesBadInput: a start with a malformed mapping file, a bad
// statsd address or a taken Prometheus port fails with the reason.
func TestEnvStatsRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("mappings:\n  - match: \"a.(\"\n    match_type: regex\n    name: \"a\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notYAML := filepath.Join(dir, "not.yaml")
	if err := os.WriteFile(notYAML, []byte("mappings: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		name string
		opts envoyrls.EnvStatsOptions
		want string
	}{
		{"bad_regex", envoyrls.EnvStatsOptions{PrometheusAddr: "127.0.0.1:0", PrometheusMapper: bad}, "bad.yaml"},
		{"malformed_yaml", envoyrls.EnvStatsOptions{PrometheusAddr: "127.0.0.1:0", PrometheusMapper: notYAML}, "not.yaml"},
		{"missing_mapping_file", envoyrls.EnvStatsOptions{PrometheusAddr: "127.0.0.1:0", PrometheusMapper: filepath.Join(dir, "none.yaml")}, "none.yaml"},
		{"port_not_a_number", envoyrls.EnvStatsOptions{StatsdAddr: "localhost:eighty"}, `port "eighty"`},
		{"port_out_of_range", envoyrls.EnvStatsOptions{StatsdAddr: "localhost:70000"}, `port "70000"`},
		{"no_port", envoyrls.EnvStatsOptions{StatsdAddr: "localhost"}, "host:port"},
		{"protocol", envoyrls.EnvStatsOptions{StatsdAddr: "localhost:8125", StatsdProtocol: "sctp"}, "udp or tcp"},
		{"prometheus_port_taken", envoyrls.EnvStatsOptions{PrometheusAddr: taken.Addr().String()}, "listen for prometheus"},
		{"path", envoyrls.EnvStatsOptions{PrometheusAddr: "127.0.0.1:0", PrometheusPath: "metrics"}, "start with '/'"},
		{"near_ratio", envoyrls.EnvStatsOptions{StatsdAddr: "localhost:8125", NearLimitRatio: 1.5}, "between 0 and 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stats, err := envoyrls.NewEnvStats(c.opts)
			if err == nil {
				stats.Close()
				t.Fatalf("started; want an error naming %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want it to name %q", err, c.want)
			}
		})
	}
}

// TestEnvStatsOffWithoutSinks: no sink, no stats (and no cost).
func TestEnvStatsOffWithoutSinks(t *testing.T) {
	stats, err := envoyrls.NewEnvStats(envoyrls.EnvStatsOptions{})
	if stats != nil || err != nil {
		t.Fatalf("%v, %v; want nil, nil", stats, err)
	}
}

func TestSanitizeStatName(t *testing.T) {
	for in, want := range map[string]string{
		"d.remote_address_10.0.0.1":     "d.remote_address_10_0_0_1",
		"d.k_a:b|c":                     "d.k_a_b_c",
		"d.k_1234.5.6.7.x":              "d.k_1234_5_6_7.x",
		"d.k_1.2.3.4567":                "d.k_1_2_3_4567",
		"d.version_1.2.3":               "d.version_1.2.3",
		"d.a_1.2.3.4.b_5.6.7.8":         "d.a_1_2_3_4.b_5_6_7_8",
		"domain.database_users.user_id": "domain.database_users.user_id",
	} {
		if got := envoyrls.SanitizeStatName(in); got != want {
			t.Errorf("SanitizeStatName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEnvStatsAllocationBudget: counting into statsd adds no allocation to
// a check: the counters are made when the configuration is compiled.
func TestEnvStatsAllocationBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops items at random, so gostats' pooled buffers allocate")
	}
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stats, err := envoyrls.NewEnvStats(envoyrls.EnvStatsOptions{StatsdAddr: conn.LocalAddr().String(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	measure := func(stats *envoyrls.EnvStats) float64 {
		store := memory.New(memory.Options{Clock: newTestClock().Now})
		t.Cleanup(func() { store.Close() })
		engine := (*observed)(nil).engine(t, store, check.Options{Clock: newTestClock().Now})
		srv := envoyrls.NewServer(envoyrls.Options{Engine: engine, Stats: stats})
		cfg, err := envoyrls.LoadDir("testdata/readme")
		if err != nil {
			t.Fatal(err)
		}
		srv.SetConfig(cfg)
		req := &rlspb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("database", "users")}}
		return testing.AllocsPerRun(200, func() { srv.ShouldRateLimit(context.Background(), req) })
	}
	without, with := measure(nil), measure(stats)
	t.Logf("%.0f allocations per check without stats, %.0f with", without, with)
	if with > without {
		t.Errorf("%.0f allocations per check with statsd stats, %.0f without; want none added", with, without)
	}
}
