package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// adminTokenPattern finds a generated token: in the JSON log record, or in
// the banner a terminal gets.
var adminTokenPattern = regexp.MustCompile(`(?:"admin_token":"|SLUICE_TOKEN=)(sat_[A-Za-z0-9_-]+)`)

func TestServeGeneratesTheAdminTokenOnce(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "sluice.db")
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: db, StoreTimeout: 50 * time.Millisecond,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info"}

	start := func() (*service, *testenv.Buffer, context.CancelFunc) {
		t.Helper()
		var stderr testenv.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		svc, err := startService(ctx, cfg, &stderr)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return svc, &stderr, cancel
	}
	svc, stderr, stop := start()
	m := adminTokenPattern.FindStringSubmatch(stderr.String())
	if m == nil {
		stop()
		t.Fatalf("no admin token printed:\n%s", stderr)
	}
	token := m[1]
	req, _ := http.NewRequest("GET", "http://"+svc.Addr+"/v1/tenants", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the printed token gets %d", resp.StatusCode)
	}
	stop()
	if err := <-svc.done; err != nil {
		t.Fatal(err)
	}
	logs := stderr.String()
	if strings.Count(logs, token) != 1 {
		t.Errorf("the token appears %d times in the output, want once (the notice)", strings.Count(logs, token))
	}

	// A restart on the same catalog keeps the stored token and prints none.
	svc, stderr, stop = start()
	stop()
	<-svc.done
	if strings.Contains(stderr.String(), "admin token generated") {
		t.Errorf("a second token was generated:\n%s", stderr)
	}
}

func TestServeRejectsBadConfiguration(t *testing.T) {
	base := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "x.db"),
		StoreTimeout: 50 * time.Millisecond, DefaultFailureMode: "closed", LogLevel: "info"}
	for _, c := range []struct {
		name    string
		change  func(*serveConfig)
		wantErr string
	}{
		{"unknown_failure_mode", func(c *serveConfig) { c.DefaultFailureMode = "sometimes" }, "--default-failure-mode"},
		{"zero_store_timeout", func(c *serveConfig) { c.StoreTimeout = 0 }, "--store-timeout"},
		{"unknown_database", func(c *serveConfig) { c.Database = "mysql://u:secret@h/db" }, "not supported"},
		{"short_admin_token", func(c *serveConfig) { c.AdminToken = "short" }, "too short"},
		{"sixteen_character_admin_token", func(c *serveConfig) { c.AdminToken = "0123456789abcdef" }, "too short"},
		{"repetitive_admin_token", func(c *serveConfig) { c.AdminToken = strings.Repeat("ab", 20) }, "too few characters"},
		{"token_and_token_file", func(c *serveConfig) { c.AdminToken, c.AdminTokenFile = strings.Repeat("0123456789", 4), "/x" }, "use one"},
		{"token_file_in_a_missing_directory", func(c *serveConfig) { c.AdminTokenFile = filepath.Join(t.TempDir(), "nope", "token") }, "--admin-token-file"},
		{"negative_drain_period", func(c *serveConfig) { c.DrainPeriod = -time.Second }, "--drain-period"},
		{"metrics_on_the_public_listener", func(c *serveConfig) { c.Addr, c.MetricsAddr = "127.0.0.1:18080", "127.0.0.1:18080" }, "--metrics-addr"},
		{"unknown_log_level", func(c *serveConfig) { c.LogLevel = "loud" }, "log level"},
		{"redis_tls_without_redis", func(c *serveConfig) { c.RedisTLS.On = true }, "--redis is not set"},
		{"redis_tls_files_without_tls", func(c *serveConfig) { c.Redis, c.RedisTLS.CA = "redis://127.0.0.1:1", "/ca.pem" }, "TLS to Redis is off"},
		{"redis_tls_cert_without_key", func(c *serveConfig) {
			c.Redis, c.RedisTLS.On, c.RedisTLS.Cert = "redis://127.0.0.1:1", true, "/c.pem"
		}, "go together"},
		{"redis_tls_missing_ca", func(c *serveConfig) {
			c.Redis, c.RedisTLS.On, c.RedisTLS.CA = "redis://127.0.0.1:1", true, filepath.Join(t.TempDir(), "nope.pem")
		}, "--redis-tls-ca: the CA file cannot be read"},
		{"unknown_envoy_counting", func(c *serveConfig) { c.EnvoyCounting = "loose" }, "--envoy-counting"},
		{"admin_write_limit_not_a_bucket", func(c *serveConfig) { c.AdminWriteLimit = "50/s" }, `--admin-write-limit "50/s": missing ':'`},
		{"admin_write_limit_zero_capacity", func(c *serveConfig) { c.AdminWriteLimit = "0:50/s" }, "--admin-write-limit"},
		{"statsd_port_not_a_number", func(c *serveConfig) {
			c.EnvoyConfig, c.EnvoyStats.StatsdAddr = envoyTestDir(t, envoyTestConfig), "localhost:eighty"
		}, `--envoy-statsd-addr, --envoy-prometheus-addr): statsd address "localhost:eighty": port "eighty" is not a number`},
		{"malformed_prometheus_mapper", func(c *serveConfig) {
			mapper := filepath.Join(t.TempDir(), "mapper.yaml")
			if err := os.WriteFile(mapper, []byte("mappings:\n  - match: \"a.(\"\n    match_type: regex\n    name: a\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			c.EnvoyConfig, c.EnvoyStats.PrometheusAddr, c.EnvoyStats.PrometheusMapper = envoyTestDir(t, envoyTestConfig), "127.0.0.1:0", mapper
		}, "prometheus mapper file"},
		{"negative_stats_flush_interval", func(c *serveConfig) { c.EnvoyStats.FlushInterval = -time.Second }, "--envoy-stats-flush-interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.change(&cfg)
			_, err := startService(context.Background(), cfg, &testenv.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks a password: %v", err)
			}
		})
	}
}

// gateStore tells when a check reaches the store (arrived) and holds it
// there until release is closed.
type gateStore struct {
	sluice.Store
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	g.once.Do(func() { close(g.arrived) })
	<-g.release
	return g.Store.Check(ctx, req)
}

func TestServeFinishesInFlightChecksOnShutdown(t *testing.T) {
	const token = "shutdown-test-admin-token-0123456789"
	gate := &gateStore{arrived: make(chan struct{}), release: make(chan struct{})}
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
		AdminToken: token, StoreTimeout: time.Minute, DefaultFailureMode: "closed", ShutdownTimeout: time.Minute, LogLevel: "info",
		wrapStore: func(s sluice.Store) sluice.Store { gate.Store = s; return gate }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var output testenv.Buffer
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + svc.Addr
	call := func(method, path, auth, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	call("POST", "/v1/tenants", token, `{"name": "acme"}`)
	_, keyBody := call("POST", "/v1/tenants/acme/keys", token, `{"role": "check"}`)
	var key struct{ Secret string }
	_ = json.Unmarshal([]byte(keyBody), &key)
	if status, body := call("PUT", "/v1/tenants/acme/rules/all", token, `{"route": "*", "limits": [{"algorithm": "token_bucket", "capacity": 5, "refill_per_second": 1}]}`); status != http.StatusCreated {
		t.Fatalf("put rule: %d %s", status, body)
	}

	result := make(chan int, 1)
	go func() {
		status, _ := call("POST", "/v1/check", key.Secret, `{"route": "/api"}`)
		result <- status
	}()
	select {
	case <-gate.arrived:
	case status := <-result:
		t.Fatalf("the check answered %d without reaching the store", status)
	case <-time.After(time.Minute):
		t.Fatal("the check never reached the store")
	}
	cancel() // what SIGTERM does
	// The shutdown has begun once the listener refuses new connections;
	// only then may the check held in the store go on.
	testenv.Eventually(t, time.Minute, "the listener closes on shutdown", func() bool {
		conn, err := net.DialTimeout("tcp", svc.Addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	close(gate.release)
	if status := <-result; status != http.StatusOK {
		t.Errorf("the in-flight check got %d, want 200", status)
	}
	if err := <-svc.done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if !strings.Contains(output.String(), "shutting down") {
		t.Errorf("no shutdown logged:\n%s", output.String())
	}
}

// TestEveryServeFlagHasItsVariableDocumented keeps docs/service.md's flag
// table complete: each flag of sluice serve with its SLUICE_* variable.
func TestEveryServeFlagHasItsVariableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/service.md")
	if err != nil {
		t.Fatal(err)
	}
	newServeCmd().Flags().VisitAll(func(f *pflag.Flag) {
		row := "| `--" + f.Name + "` | `" + envName(f.Name) + "` |"
		if !bytes.Contains(doc, []byte(row)) {
			t.Errorf("docs/service.md has no row starting %s", row)
		}
	})
}

// TestServeReadsItsFlagsFromTheEnvironment runs sluice serve as a user does,
// with configuration only in SLUICE_* variables. (One run only: rootCmd is
// shared, and a flag set once counts as given afterwards.)
func TestServeReadsItsFlagsFromTheEnvironment(t *testing.T) {
	t.Setenv("SLUICE_DATABASE", "sqlite://"+filepath.Join(t.TempDir(), "env.db"))
	t.Setenv("SLUICE_ADDR", "127.0.0.1:0")
	t.Setenv("SLUICE_STORE_TIMEOUT", "0s")
	_, _, err := runCLI(t, "serve")
	if err == nil || !strings.Contains(err.Error(), "--store-timeout must be positive") {
		t.Fatalf("error %v, want SLUICE_STORE_TIMEOUT=0s refused as --store-timeout", err)
	}
}

// TestServeWritesAGeneratedTokenToTheTokenFile: --admin-token-file naming a
// file not there yet, on an empty catalog, gets the generated token (mode
// 0600), which works and is printed nowhere, whatever the log level.
func TestServeWritesAGeneratedTokenToTheTokenFile(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(dir, "sluice.db"), AdminTokenFile: tokenFile,
		StoreTimeout: 50 * time.Millisecond, DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "debug"}
	ctx, cancel := context.WithCancel(context.Background())
	var output testenv.Buffer
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-svc.done })
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	if info, _ := os.Stat(tokenFile); info.Mode().Perm() != 0o600 {
		t.Errorf("the token file's mode is %v, want 0600", info.Mode().Perm())
	}
	req, _ := http.NewRequest("GET", "http://"+svc.Addr+"/v1/tenants", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the token of the file is refused: %d", resp.StatusCode)
	}
	if strings.Contains(output.String(), token) || !strings.Contains(output.String(), "written to --admin-token-file") {
		t.Errorf("the token shows in the output, or its file is not named:\n%s", output.String())
	}
}

// TestServeOperationalSafety: the token from a file (never the command line),
// the SQLite catalog readable by its owner only, /metrics on its own
// listener when asked, and a drain period on shutdown during which /readyz
// answers 503 while checks are still served.
func TestServeOperationalSafety(t *testing.T) {
	dir := t.TempDir()
	token := "file-test-admin-token-0123456789abcdef"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(dir, "sluice.db")
	const drainPeriod = 2 * time.Second
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + dbPath, AdminTokenFile: tokenFile,
		MetricsAddr: "127.0.0.1:0", StoreTimeout: 50 * time.Millisecond, DefaultFailureMode: "closed",
		ShutdownTimeout: 5 * time.Second, DrainPeriod: drainPeriod, LogLevel: "info"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var output testenv.Buffer
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, auth string) int {
		req, _ := http.NewRequest("GET", "http://"+svc.Addr+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/v1/tenants", token); code != http.StatusOK {
		t.Fatalf("the token from the file is refused: %d", code)
	}
	if strings.Contains(output.String(), "admin token generated") {
		t.Error("a token was generated although one was given in a file")
	}
	info, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("the SQLite catalog is created with mode %v, readable by others", perm)
	}
	if code := get("/metrics", ""); code != http.StatusNotFound {
		t.Errorf("/metrics on the public listener: %d, want 404 with --metrics-addr", code)
	}
	if !strings.Contains(output.String(), `"msg":"metrics listening"`) {
		t.Errorf("no metrics listener logged:\n%s", output.String())
	}

	cancel()
	// Within the drain period (generous, so a busy machine cannot end it
	// before the first probe), /readyz turns 503 while requests are served.
	testenv.Eventually(t, drainPeriod, "/readyz answers 503 during the drain period", func() bool {
		return get("/readyz", "") == http.StatusServiceUnavailable
	})
	if code := get("/v1/tenants", token); code != http.StatusOK {
		t.Fatalf("while draining, an admin call answered %d", code)
	}
	if err := <-svc.done; err != nil {
		t.Fatal(err)
	}
}
