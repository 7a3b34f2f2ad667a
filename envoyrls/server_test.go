package envoyrls_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// testClock is a settable clock for the memory store.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	// Just after the start of a year, so every unit's window (aligned to the
	// epoch) is far from its end... except a second's: tests of per-second
	// rules never move the clock.
	c.ns.Store(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// observed is a metrics registry to read decisions back from.
type observed struct {
	reg     *prometheus.Registry
	metrics *metrics.Metrics
}

func newObserved() *observed {
	reg := prometheus.NewRegistry()
	return &observed{reg: reg, metrics: metrics.New(reg)}
}

// count reads sluice_decisions_total of an Envoy rule (of any domain) and
// result.
func (o *observed) count(rule, result string) int {
	mfs, err := o.reg.Gather()
	if err != nil {
		panic(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == "envoy" && labels["rule"] == rule && labels["result"] == result {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// engine returns a check engine over store reporting to o (o may be nil).
func (o *observed) engine(t testing.TB, store sluice.Store, opts check.Options) *check.Engine {
	if o != nil {
		opts.Metrics = o.metrics
	}
	e := check.New(store, opts)
	t.Cleanup(func() { e.Close() })
	return e
}

// serve starts srv on a real loopback listener and returns a generated client.
func serve(t *testing.T, srv *envoyrls.Server) rlspb.RateLimitServiceClient {
	t.Helper()
	conn := serveConn(t, srv)
	return rlspb.NewRateLimitServiceClient(conn)
}

func serveConn(t *testing.T, srv *envoyrls.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoyrls.ServerOptions()...) // as sluice serve does
	srv.Register(gs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// memoryServer is a server on a memory store with a settable clock, loaded
// from dir.
func memoryServer(t testing.TB, dir string, opts envoyrls.Options) (*envoyrls.Server, *testClock) {
	return memoryServerObserved(t, dir, opts, nil)
}

// memoryServerObserved is memoryServer reporting decisions to obs.
func memoryServerObserved(t testing.TB, dir string, opts envoyrls.Options, obs *observed) (*envoyrls.Server, *testClock) {
	t.Helper()
	clock := newTestClock()
	store := memory.New(memory.Options{Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	if opts.Engine == nil {
		opts.Engine = obs.engine(t, store, check.Options{Clock: clock.Now})
	}
	if opts.Clock == nil {
		opts.Clock = clock.Now
	}
	srv := envoyrls.NewServer(opts)
	cfg, err := envoyrls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetConfig(cfg)
	return srv, clock
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, hits uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

func call(t *testing.T, c rlspb.RateLimitServiceClient, domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	return callHits(t, c, domain, 0, descs...)
}

func callHits(t *testing.T, c rlspb.RateLimitServiceClient, domain string, hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// TestREADMEExamples replays the configuration examples of
// envoyproxy/ratelimit's README against their documented behaviour.
func TestREADMEExamples(t *testing.T) {
	type step struct {
		descs []*ratelimitv3.RateLimitDescriptor
		times int
		want  []rlspb.RateLimitResponse_Code // per descriptor, for every call
	}
	tests := []struct {
		name   string
		domain string
		steps  []step
	}{
		{"key_value_limits_its_value", "mongo_cps", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("database", "users")}, 500, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("database", "users")}, 1, []rlspb.RateLimitResponse_Code{over}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("database", "default")}, 1, []rlspb.RateLimitResponse_Code{ok}},
		}},
		{"unconfigured_value_is_not_limited", "mongo_cps", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("database", "other")}, 600, []rlspb.RateLimitResponse_Code{ok}},
		}},
		{"nested_key_only_counts_each_value", "messaging", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061234567")}, 5, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061234567")}, 1, []rlspb.RateLimitResponse_Code{over}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061111111")}, 5, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("to_number", "2061234567")}, 100, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("to_number", "2061234567")}, 1, []rlspb.RateLimitResponse_Code{over}},
		}},
		{"each_descriptor_has_its_own_status", "messaging", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1")}, 5, []rlspb.RateLimitResponse_Code{ok, ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1")}, 1, []rlspb.RateLimitResponse_Code{over, ok}},
		}},
		{"parent_without_rate_limit_is_not_limited", "messaging", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing")}, 20, []rlspb.RateLimitResponse_Code{ok}},
		}},
		{"per_ip_and_blocked_ip", "edge_proxy_per_ip", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}, 10, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}, 1, []rlspb.RateLimitResponse_Code{over}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.0.0.2")}, 10, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("remote_address", "50.0.0.5")}, 1, []rlspb.RateLimitResponse_Code{over}},
		}},
		{"nested_exact_beats_key_only", "rl", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("source_cluster", "proxy", "destination_cluster", "bar")}, 1, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("source_cluster", "proxy", "destination_cluster", "bar")}, 1, []rlspb.RateLimitResponse_Code{over}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("source_cluster", "proxy", "destination_cluster", "foo")}, 3, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("source_cluster", "proxy", "destination_cluster", "foo")}, 1, []rlspb.RateLimitResponse_Code{over}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("source_cluster", "proxy", "destination_cluster", "baz")}, 3, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "mock")}, 2, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "mock")}, 1, []rlspb.RateLimitResponse_Code{over}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("source_cluster", "other", "destination_cluster", "bar")}, 5, []rlspb.RateLimitResponse_Code{ok}},
		}},
		{"unlimited_is_never_limited_and_exact_wins", "internal", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("ldap", "x")}, 50, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("azure", "admin")}, 50, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("azure", "user")}, 2, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("azure", "user")}, 1, []rlspb.RateLimitResponse_Code{over}},
		}},
		{"shadow_mode_reports_ok", "example4", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("key", "value", "subkey", "subvalue")}, 5, []rlspb.RateLimitResponse_Code{ok}},
		}},
		{"replaces_drops_the_named_limit", "bkthomps", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "bkthomps"), desc("source_cluster", "proxy")}, 3, []rlspb.RateLimitResponse_Code{ok, ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "bkthomps"), desc("source_cluster", "proxy")}, 1, []rlspb.RateLimitResponse_Code{ok, over}},
			// Alone, the named limit applies again: 1 per minute.
			{[]*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "bkthomps")}, 1, []rlspb.RateLimitResponse_Code{ok}},
			{[]*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "bkthomps")}, 1, []rlspb.RateLimitResponse_Code{over}},
		}},
		{"unknown_domain_is_not_limited", "nobody", []step{
			{[]*ratelimitv3.RateLimitDescriptor{desc("a", "b")}, 3, []rlspb.RateLimitResponse_Code{ok}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{})
			c := serve(t, srv)
			for si, s := range tt.steps {
				for n := 0; n < s.times; n++ {
					resp := call(t, c, tt.domain, s.descs...)
					overall := ok
					for i, w := range s.want {
						if got := resp.Statuses[i].Code; got != w {
							t.Fatalf("step %d call %d: descriptor %d: got %v, want %v", si, n+1, i, got, w)
						}
						if w == over {
							overall = over
						}
					}
					if resp.OverallCode != overall {
						t.Fatalf("step %d call %d: overall %v, want %v", si, n+1, resp.OverallCode, overall)
					}
				}
			}
		})
	}
}

func TestDescriptorStatusFigures(t *testing.T) {
	srv, clock := memoryServer(t, "testdata/readme", envoyrls.Options{})
	c := serve(t, srv)
	clock.Advance(10 * time.Second)
	resp := call(t, c, "rl", desc("source_cluster", "proxy", "destination_cluster", "foo"))
	st := resp.Statuses[0]
	if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit = %v, want 3 per MINUTE", st.CurrentLimit)
	}
	if st.LimitRemaining != 2 {
		t.Errorf("limit_remaining = %d, want 2", st.LimitRemaining)
	}
	// A fixed window aligned to the minute: 50s left of it.
	if got := st.DurationUntilReset.AsDuration(); got != 50*time.Second {
		t.Errorf("duration_until_reset = %v, want 50s", got)
	}
	resp = call(t, c, "internal", desc("ldap", "x"))
	if st := resp.Statuses[0]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != 1<<32-1 {
		t.Errorf("unlimited status = %v, want OK, no current_limit, remaining MaxUint32", st)
	}
	resp = call(t, c, "mongo_cps", desc("database", "nothing"))
	if st := resp.Statuses[0]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != 0 {
		t.Errorf("unmatched status = %v, want bare OK", st)
	}
}

func TestShadowModeCountsShadowDenied(t *testing.T) {
	obs := newObserved()
	srv, _ := memoryServerObserved(t, "testdata/readme", envoyrls.Options{}, obs)
	c := serve(t, srv)
	for range 5 {
		if resp := call(t, c, "example4", desc("key", "value", "subkey", "subvalue")); resp.OverallCode != ok {
			t.Fatalf("shadow rule answered %v", resp.OverallCode)
		}
	}
	rule := "key=value.subkey=subvalue"
	if a, d := obs.count(rule, "allowed"), obs.count(rule, "shadow_denied"); a != 2 || d != 3 {
		t.Errorf("allowed=%d shadow_denied=%d, want 2 and 3", a, d)
	}
}

func TestHitsAddend(t *testing.T) {
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{})
	c := serve(t, srv)
	ip := func(v string) *ratelimitv3.RateLimitDescriptor { return desc("remote_address", v) }

	// Request-level hits_addend: 10 per second.
	if r := callHits(t, c, "edge_proxy_per_ip", 7, ip("a")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("7 hits: %v", r)
	}
	if r := callHits(t, c, "edge_proxy_per_ip", 4, ip("a")); r.OverallCode != over {
		t.Fatalf("4 more hits over 3 remaining: %v", r.OverallCode)
	}
	// The deny consumed nothing: 3 still fit.
	if r := callHits(t, c, "edge_proxy_per_ip", 3, ip("a")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("3 hits after a deny: %v", r)
	}
	// A descriptor's own hits_addend overrides the request's; 0 only looks.
	if r := callHits(t, c, "edge_proxy_per_ip", 5, withHits(ip("b"), 2), ip("c")); r.Statuses[0].LimitRemaining != 8 || r.Statuses[1].LimitRemaining != 5 {
		t.Fatalf("per-descriptor hits: %v", r)
	}
	if r := call(t, c, "edge_proxy_per_ip", withHits(ip("b"), 0)); r.Statuses[0].LimitRemaining != 8 {
		t.Fatalf("0 hits consumed: %v", r)
	}
	// More hits than the limit can ever hold: over the limit, not an error.
	if r := callHits(t, c, "edge_proxy_per_ip", 11, ip("d")); r.OverallCode != over {
		t.Fatalf("11 hits on a limit of 10: %v", r.OverallCode)
	}
}

func TestHealthServingOnceConfigured(t *testing.T) {
	srv := envoyrls.NewServer(envoyrls.Options{Engine: (*observed)(nil).engine(t, memory.New(memory.Options{}), check.Options{})})
	conn := serveConn(t, srv)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	// The overall status, the service's full name, and "ratelimit", the
	// name envoyproxy/ratelimit reports (probes written for it must work).
	services := []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}
	expect := func(when string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range services {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.Status != want {
				t.Fatalf("%s: health of %q: %v, %v; want %v", when, name, r, err, want)
			}
		}
	}
	expect("before config", healthpb.HealthCheckResponse_NOT_SERVING)
	// Without a configuration, checks fail rather than pretend.
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}); err == nil {
		t.Fatal("a server without configuration answered")
	}
	cfg, err := envoyrls.LoadDir("testdata/readme")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetConfig(cfg)
	expect("after config", healthpb.HealthCheckResponse_SERVING)
	srv.Shutdown()
	expect("after shutdown", healthpb.HealthCheckResponse_NOT_SERVING)
}

// inFlight records the most checks that ran at once through a real store.
type inFlight struct {
	sluice.Store
	now, peak atomic.Int64
}

func (f *inFlight) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	n := f.now.Add(1)
	defer f.now.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	// Stay in flight a little, so unbounded fan-out would show.
	time.Sleep(time.Millisecond)
	return f.Store.Check(ctx, req)
}

// TestManyDescriptorsBoundedFanOut sends one request with as many
// descriptors as accepted: each gets its status, and the store calls run a
// bounded number at a time rather than one goroutine per descriptor.
func TestManyDescriptorsBoundedFanOut(t *testing.T) {
	// A fixed clock: the per-second window cannot roll over mid-request.
	store := memory.New(memory.Options{Clock: newTestClock().Now})
	t.Cleanup(func() { store.Close() })
	f := &inFlight{Store: store}
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{Engine: (*observed)(nil).engine(t, f, check.Options{})})
	c := serve(t, srv)
	const n = envoyrls.MaxDescriptors
	descs := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range descs {
		descs[i] = desc("remote_address", "10.0.0.1") // 10 per second
	}
	resp := call(t, c, "edge_proxy_per_ip", descs...)
	var admitted int
	for _, st := range resp.Statuses {
		if st.Code == ok {
			admitted++
		}
	}
	if len(resp.Statuses) != n || admitted != 10 || resp.OverallCode != over {
		t.Fatalf("%d statuses, %d OK, overall %v; want %d, 10, OVER_LIMIT", len(resp.Statuses), admitted, resp.OverallCode, n)
	}
	if p := f.peak.Load(); p > 16 {
		t.Fatalf("%d store calls in flight at once for one request, want at most 16", p)
	}
}

// TestServeBeforeConfig: with ServeBeforeConfig (FORCE_START_WITHOUT_INITIAL_CONFIG)
// the health check passes before any configuration arrives, and calls are
// answered UNAVAILABLE meanwhile, as envoyproxy/ratelimit does; without it
// the health check fails until then.
func TestServeBeforeConfig(t *testing.T) {
	for _, force := range []bool{false, true} {
		engine := check.New(memory.New(memory.Options{}), check.Options{})
		t.Cleanup(func() { engine.Close() })
		srv := envoyrls.NewServer(envoyrls.Options{Engine: engine, ServeBeforeConfig: force})
		rec := httptest.NewRecorder()
		srv.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthcheck", nil))
		if healthy := rec.Code == http.StatusOK; healthy != force {
			t.Errorf("ServeBeforeConfig %v: /healthcheck %d before any configuration", force, rec.Code)
		}
		_, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("ServeBeforeConfig %v: a call before any configuration: %v, want UNAVAILABLE", force, err)
		}
	}
}

func TestOptionsCheckHeaders(t *testing.T) {
	for name, c := range map[string]struct {
		opts envoyrls.Options
		want string
	}{
		"defaults":     {envoyrls.Options{}, ""},
		"ietf":         {envoyrls.Options{HeaderStyle: envoyrls.HeaderStyleIETF}, ""},
		"renamed":      {envoyrls.Options{HeaderLimit: "X-Quota", HeaderRemaining: "X-Quota-Left", HeaderReset: "X-Quota-Reset"}, ""},
		"bad_style":    {envoyrls.Options{HeaderStyle: "draft"}, `--envoy-header-style "draft" is not one of envoy, ietf`},
		"space":        {envoyrls.Options{HeaderLimit: "X Quota"}, `--envoy-header-limit "X Quota" is not a valid HTTP header name`},
		"separator":    {envoyrls.Options{HeaderRemaining: "X-Quota:"}, "--envoy-header-remaining"},
		"non_ascii":    {envoyrls.Options{HeaderReset: "X-Quotä"}, "--envoy-header-reset"},
		"control_char": {envoyrls.Options{HeaderReset: "X-\x01"}, "--envoy-header-reset"},
	} {
		err := c.opts.CheckHeaders()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
}
