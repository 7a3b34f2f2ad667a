package envoyrls_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
	"github.com/sluicelabs/sluice/internal/xdstest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

func envoyTestDir(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const envoyTestConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`

func TestStartServiceConfigurationErrors(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name    string
		cfg     envoyrls.ServiceConfig
		wantErr string
	}{
		{"grpc_without_config", envoyrls.ServiceConfig{GRPCAddr: "127.0.0.1:0", Options: envoyrls.Options{Engine: engine, Logger: quiet}}, "--envoy-config"},
		{"json_without_config", envoyrls.ServiceConfig{JSONAddr: "127.0.0.1:0", Options: envoyrls.Options{Engine: engine, Logger: quiet}}, "--envoy-config"},
		{"json_addr_taken", envoyrls.ServiceConfig{JSONAddr: "256.0.0.1:1", Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)}}, "--envoy-json-addr"},
		{"missing_directory", envoyrls.ServiceConfig{Source: envoyrls.Source{Dir: filepath.Join(t.TempDir(), "nope")}, Options: envoyrls.Options{Engine: engine, Logger: quiet}}, "--envoy-config"},
		{"broken_file", envoyrls.ServiceConfig{Source: envoyrls.Source{Dir: envoyTestDir(t, "domain: [")}}, "api.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Engine == nil {
				tt.cfg.Engine, tt.cfg.Logger = engine, quiet
			}
			stop, err := envoyrls.StartService(context.Background(), tt.cfg)
			if err == nil {
				stop(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestStartServiceOffWithoutFlags(t *testing.T) {
	stop, err := envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// postJSON posts body to url's /json and returns the status.
func postJSON(t *testing.T, url, body string) int {
	t.Helper()
	r, err := http.Post(url+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}

// getHealth returns the status of url's GET /healthcheck, and its body.
func getHealth(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.Get(url + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

const envoyTestJSONBody = `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u"}]}]}`

func TestStartServiceServesGRPCAndJSON(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	jsonAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	mux := http.NewServeMux()
	stop, err := envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{
		GRPCAddr: addr,
		JSONAddr: jsonAddr,
		Source:   envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)},
		Options:  envoyrls.Options{Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Mux:      mux,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop(context.Background())
		}
	})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("gRPC: %v, %v", resp, err)
	}

	// POST /json is not on the tenant API's mux, even when configured.
	ts := httptest.NewServer(mux)
	defer ts.Close()
	if got := postJSON(t, ts.URL, envoyTestJSONBody); got != http.StatusNotFound && got != http.StatusMethodNotAllowed {
		t.Fatalf("POST /json on the main mux: %d, want 404 or 405", got)
	}
	// On its own listener it shares the counters: one left, then over.
	jsonURL := "http://" + jsonAddr
	for _, want := range []int{200, 429} {
		if got := postJSON(t, jsonURL, envoyTestJSONBody); got != want {
			t.Fatalf("POST /json on --envoy-json-addr: %d, want %d", got, want)
		}
	}

	// envoyproxy/ratelimit's HTTP health path answers on both.
	for _, url := range []string{ts.URL, jsonURL} {
		if code, body := getHealth(t, url); code != 200 || body != "OK" {
			t.Fatalf("GET %s/healthcheck: %d %q, want 200 OK", url, code, body)
		}
	}

	stopped = true
	if err := stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err == nil {
		t.Fatal("answered after stop")
	}
	if r, err := http.Post(jsonURL+"/json", "application/json", strings.NewReader(envoyTestJSONBody)); err == nil {
		r.Body.Close()
		t.Fatal("--envoy-json-addr answered after stop")
	}
	// The HTTP listener outlives the gRPC one during shutdown; its health
	// path must not say OK any more.
	if code, _ := getHealth(t, ts.URL); code != 500 {
		t.Fatalf("GET /healthcheck after stop: %d; want 500", code)
	}
}

// TestStartServiceHTTPOnlyHealth: without --grpc-addr, GET /healthcheck still
// serves on the main mux, and stopping turns it to 500 so probes drain the
// instance.
func TestStartServiceHTTPOnlyHealth(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer engine.Close()
	t.Cleanup(func() { store.Close() })
	mux := http.NewServeMux()
	stop, err := envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{
		Source:  envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)},
		Options: envoyrls.Options{Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Mux:     mux,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mux)
	defer ts.Close()
	health := func() int {
		t.Helper()
		r, err := http.Get(ts.URL + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if got := health(); got != 200 {
		t.Fatalf("GET /healthcheck while serving: %d, want 200", got)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != 500 {
		t.Fatalf("GET /healthcheck after stop: %d, want 500", got)
	}
}

// startTestEnvoy starts the Envoy face on a memory store with cfg (Engine
// and Logger filled in when unset) and stops it when the test ends.
func startTestEnvoy(t *testing.T, cfg envoyrls.ServiceConfig) {
	t.Helper()
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	t.Cleanup(func() { engine.Close(); store.Close() })
	if cfg.Engine == nil {
		cfg.Engine = engine
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	stop, err := envoyrls.StartService(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

var envoyTestRequest = &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
	Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
}}}

// shouldRateLimit calls ShouldRateLimit once on a new connection to target.
func shouldRateLimit(target string, creds credentials.TransportCredentials) (*rlspb.RateLimitResponse, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, envoyTestRequest)
}

// shortTempDir is a temporary directory short enough for a unix socket path
// (at most 108 bytes), which t.TempDir's long names may exceed.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-uds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestEnvoyGRPCOnUnixSocketWithClientSAN: --grpc-uds serves the same
// service as --grpc-addr, behind the same mutual TLS, and
// --grpc-tls-client-san refuses a client certificate of the right CA that
// does not carry the name.
func TestEnvoyGRPCOnUnixSocketWithClientSAN(t *testing.T) {
	f := newTLSFixture(t, "grpc-ca")
	reloader, err := tlsconfig.New(tlsconfig.Files{Cert: f.cert, Key: f.key, ClientCA: f.caFile}, tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shortTempDir(t), "rls.sock")
	addr := freeAddr(t)
	startTestEnvoy(t, envoyrls.ServiceConfig{GRPCAddr: addr, GRPCUDS: sock, Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)},
		GRPC: envoyrls.GRPCOptions{TLS: reloader, ClientSAN: "envoy.internal"}})

	named := f.ca.Client(t, "envoy", "envoy.internal").TLSCertificate(t)
	unnamed := f.ca.Client(t, "other", "other.internal").TLSCertificate(t)
	clientTLS := func(cert tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: f.ca.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "localhost"})
	}
	for _, target := range []string{addr, "unix://" + sock} {
		resp, err := shouldRateLimit(target, clientTLS(named))
		if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
			t.Errorf("%s with a certificate for envoy.internal: %v, %v; want OK", target, resp, err)
		}
		if _, err := shouldRateLimit(target, clientTLS(unnamed)); err == nil {
			t.Errorf("%s answered a client certificate without envoy.internal", target)
		}
		if _, err := shouldRateLimit(target, insecure.NewCredentials()); err == nil {
			t.Errorf("%s answered a plaintext client", target)
		}
	}
}

// TestEnvoyUnixSocketReplacesAStaleSocketOnly: a socket a killed process left
// behind is replaced; a socket in use, or a regular file, is an error and
// kept.
func TestEnvoyUnixSocketReplacesAStaleSocketOnly(t *testing.T) {
	dir := shortTempDir(t)
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer func() { engine.Close(); store.Close() }()
	_, err := envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{GRPCUDS: file, Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)},
		Options: envoyrls.Options{Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("error %v, want the regular file refused", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("the regular file was touched")
	}

	// A socket file nobody listens on, as a killed process leaves it.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	startTestEnvoy(t, envoyrls.ServiceConfig{GRPCUDS: stale, Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)}})
	if resp, err := shouldRateLimit("unix://"+stale, insecure.NewCredentials()); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("over the replaced socket: %v, %v", resp, err)
	}
	// Now in use: a second server must not take it over.
	_, err = envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{GRPCUDS: stale, Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)},
		Options: envoyrls.Options{Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("error %v, want the live socket refused", err)
	}
}

// TestEnvoyMaxConnectionAgeClosesConnections: with --grpc-max-connection-age
// the server ends each connection after that long (Envoy then reconnects,
// possibly to a newer instance); without it a connection stays up.
func TestEnvoyMaxConnectionAgeClosesConnections(t *testing.T) {
	for _, age := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(age.String(), func(t *testing.T) {
			addr := freeAddr(t)
			startTestEnvoy(t, envoyrls.ServiceConfig{GRPCAddr: addr, Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)}, GRPC: envoyrls.GRPCOptions{MaxConnAge: age, MaxConnAgeGrace: time.Second}})
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, envoyTestRequest); err != nil {
				t.Fatal(err)
			}
			// Ten ages, generously: the deadline is not what is tested.
			wait := 3 * time.Second
			waitCtx, cancelWait := context.WithTimeout(context.Background(), wait)
			defer cancelWait()
			changed := conn.WaitForStateChange(waitCtx, connectivity.Ready)
			if age == 0 && changed {
				t.Fatalf("without a maximum age the connection left READY (%v)", conn.GetState())
			}
			if age > 0 && !changed {
				t.Fatalf("the connection was still READY %v after a maximum age of %v", wait, age)
			}
		})
	}
}

// gaugeOrCounter reads the value of a metric family (with the given label
// value, if any) from reg.
func gaugeOrCounter(t *testing.T, reg *prometheus.Registry, name, labelValue string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != labelValue) {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no metric %s{%s}", name, labelValue)
	return 0
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// TestEnvoyDebugListenerAndLoadMetrics: /rlconfig on --debug-addr shows the
// configuration in force; a broken edit counts a failed load and leaves
// both the configuration and the last-success time as they were; a fixed
// one counts a success.
func TestEnvoyDebugListenerAndLoadMetrics(t *testing.T) {
	dir := envoyTestDir(t, envoyTestConfig)
	debugAddr := freeAddr(t)
	reg := prometheus.NewRegistry()
	startTestEnvoy(t, envoyrls.ServiceConfig{Source: envoyrls.Source{Dir: dir}, DebugAddr: debugAddr, Options: envoyrls.Options{Metrics: metrics.New(reg)}})

	const want = "api.user: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
	if got := getText(t, "http://"+debugAddr+"/rlconfig"); got != want {
		t.Fatalf("/rlconfig:\n%q\nwant\n%q", got, want)
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "success"); got != 1 {
		t.Fatalf("successful loads %v, want 1", got)
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "failure"); got != 0 {
		t.Fatalf("failed loads %v, want 0", got)
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_last_failure_timestamp_seconds", ""); got != 0 {
		t.Fatalf("last failure at %v with none, want 0", got)
	}
	firstSuccess := gaugeOrCounter(t, reg, "sluice_envoy_config_last_success_timestamp_seconds", "")
	if firstSuccess < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("last success at %v, want about now", firstSuccess)
	}

	write := func(content string) {
		if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 15s: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	write("domain: [")
	waitFor("a failed load counted", func() bool { return gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "failure") == 1 })
	if got := getText(t, "http://"+debugAddr+"/rlconfig"); got != want {
		t.Fatalf("/rlconfig after a broken edit:\n%q\nwant the last good one\n%q", got, want)
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_last_success_timestamp_seconds", ""); got != firstSuccess {
		t.Fatalf("last success moved to %v on a failed load", got)
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_last_failure_timestamp_seconds", ""); got < firstSuccess {
		t.Fatalf("last failure at %v, want after the last success %v", got, firstSuccess)
	}

	write(`domain: api
descriptors:
  - key: user
    value: "a.b"
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 1}
`)
	waitFor("a successful reload counted", func() bool { return gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "success") == 2 })
	const want2 = "api.user_a.b: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"api.user_a.b.path: unit=SECOND requests_per_unit=1, shadow_mode: true, quota_mode: false\n"
	if got := getText(t, "http://"+debugAddr+"/rlconfig"); got != want2 {
		t.Fatalf("/rlconfig after the fix:\n%q\nwant\n%q", got, want2)
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "failure"); got != 1 {
		t.Fatalf("failed loads %v after the fix, want still 1 (a broken directory is counted once, not at every poll)", got)
	}
}

// TestEnvoyWarnsOfAnEmptyDirectory: a directory with no configuration file
// loads (as in envoyproxy/ratelimit) but says so, since every request is
// then answered OK.
func TestEnvoyWarnsOfAnEmptyDirectory(t *testing.T) {
	var logs testenv.Buffer
	startTestEnvoy(t, envoyrls.ServiceConfig{Source: envoyrls.Source{Dir: t.TempDir()}, Options: envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "holds no configuration file") {
		t.Fatalf("no warning of the empty directory in:\n%s", logs.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}

// TestEnvoyConfigFromXDS: with --envoy-xds-server the service starts
// NOT_SERVING, and serves once the management server sends its node a
// configuration, counted as a load.
func TestEnvoyConfigFromXDS(t *testing.T) {
	mgmt := xdstest.Start(t)
	addr := freeAddr(t)
	reg := prometheus.NewRegistry()
	startTestEnvoy(t, envoyrls.ServiceConfig{GRPCAddr: addr, Source: envoyrls.Source{XDSServer: mgmt.Addr, XDS: envoyrls.XDSOptions{NodeID: "rls", RetryInterval: 50 * time.Millisecond}}, Options: envoyrls.Options{Metrics: metrics.New(reg)}})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return h.Status
	}
	if got := health(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health %v before any configuration, want NOT_SERVING", got)
	}
	mgmt.Set(t, "rls", "1", &rlconfv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1},
	}}})
	deadline := time.Now().Add(15 * time.Second) // generous: not what is tested
	for health() != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("not SERVING within 15s of the snapshot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if resp, err := shouldRateLimit(addr, insecure.NewCredentials()); err != nil || resp.OverallCode != want {
			t.Fatalf("ShouldRateLimit: %v, %v; want %v", resp, err, want)
		}
	}
	if got := gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "success"); got != 1 {
		t.Fatalf("successful loads %v, want 1", got)
	}
}

func TestStartServiceRefusesTwoConfigurationSources(t *testing.T) {
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	defer func() { engine.Close(); store.Close() }()
	_, err := envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig), XDSServer: "127.0.0.1:1"}, Options: envoyrls.Options{Engine: engine}})
	if err == nil || !strings.Contains(err.Error(), "use one") {
		t.Fatalf("error %v, want both sources refused", err)
	}
}

// TestEnvoyGRPCCertificateReload: a certificate rotated on disk is served to
// new gRPC connections without a restart (GRPC_SERVER_TLS_CERT has no such
// reload in envoyproxy/ratelimit).
func TestEnvoyGRPCCertificateReload(t *testing.T) {
	f := newTLSFixture(t, "grpc-ca")
	reloader, err := tlsconfig.New(tlsconfig.Files{Cert: f.cert, Key: f.key}, tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startTestEnvoy(t, envoyrls.ServiceConfig{GRPCAddr: addr, Source: envoyrls.Source{Dir: envoyTestDir(t, envoyTestConfig)}, GRPC: envoyrls.GRPCOptions{TLS: reloader}})
	servedSerial := func() string {
		t.Helper()
		var serial string
		creds := credentials.NewTLS(&tls.Config{RootCAs: f.ca.Pool(), VerifyConnection: func(cs tls.ConnectionState) error {
			serial = cs.PeerCertificates[0].SerialNumber.String()
			return nil
		}})
		if _, err := shouldRateLimit(addr, creds); err != nil {
			t.Fatal(err)
		}
		return serial
	}
	first := servedSerial()
	next := f.ca.Server(t)
	next.Write(t, filepath.Dir(f.cert), "server")
	deadline := time.Now().Add(15 * time.Second) // generous: not what is tested
	for servedSerial() != next.Serial.String() {
		if time.Now().After(deadline) {
			t.Fatalf("still serving serial %s 15s after the rotation, want %s", first, next.Serial)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnvoyConfigFromXDSOverMutualTLS: --envoy-xds-tls-* dial the management
// server over mutual TLS, verifying it against the given CA and name.
func TestEnvoyConfigFromXDSOverMutualTLS(t *testing.T) {
	f := newTLSFixture(t, "xds-ca")
	serverPair, err := tlsconfig.LoadKeyPair(f.cert, f.key)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := xdstest.Start(t, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*serverPair}, ClientCAs: f.ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	})))
	clientCert, clientKey := f.ca.Client(t, "sluice").Write(t, t.TempDir(), "client")
	mgmt.Set(t, "rls", "1", &rlconfv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1},
	}}})
	reg := prometheus.NewRegistry()
	startTestEnvoy(t, envoyrls.ServiceConfig{Options: envoyrls.Options{Metrics: metrics.New(reg)},
		Source: envoyrls.Source{XDSServer: mgmt.Addr, XDS: envoyrls.XDSOptions{NodeID: "rls", RetryInterval: 50 * time.Millisecond},
			XDSTLS: &envoyrls.XDSTLS{CA: f.caFile, Cert: clientCert, Key: clientKey, ServerName: "localhost"}}})
	deadline := time.Now().Add(15 * time.Second) // generous: not what is tested
	for gaugeOrCounter(t, reg, "sluice_envoy_config_loads_total", "success") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no configuration from the xDS server over mutual TLS within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartServiceRefusesBadHeaderNames(t *testing.T) {
	dir := envoyTestDir(t, envoyTestConfig)
	for _, tt := range []struct {
		opts envoyrls.Options
		want string
	}{
		{envoyrls.Options{HeaderStyle: "draft"}, "--envoy-header-style"},
		{envoyrls.Options{HeaderStyle: "envoy", HeaderLimit: "Bad Name"}, "--envoy-header-limit"},
	} {
		_, err := envoyrls.StartService(context.Background(), envoyrls.ServiceConfig{Source: envoyrls.Source{Dir: dir}, Options: tt.opts})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error naming %s", tt.opts, err, tt.want)
		}
	}
}

// tlsFixture is a CA with a server certificate and a client certificate on
// disk.
type tlsFixture struct {
	ca                *tlstest.CA
	cert, key, caFile string
	client            tls.Certificate
}

func newTLSFixture(t *testing.T, name string) tlsFixture {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, name)
	cert, key := ca.Server(t).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	return tlsFixture{ca: ca, cert: cert, key: key, caFile: caFile, client: ca.Client(t, "client").TLSCertificate(t)}
}
