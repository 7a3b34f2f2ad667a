package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/loadgen"
)

// benchConfigFor is the configuration sluice bench gets from args, defaults
// included.
func benchConfigFor(t *testing.T, args ...string) benchConfig {
	t.Helper()
	var cfg benchConfig
	f := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	addBenchFlags(f, &cfg)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg.MetricsURLSet = f.Changed("metrics-url")
	return cfg
}

func TestBenchConfigValidation(t *testing.T) {
	httpArgs := []string{"--api-key", "k", "--route", "/x"}
	envoyArgs := []string{"--target", "envoy", "--domain", "api"}
	for name, c := range map[string]struct {
		args []string
		says string
	}{
		"no_key":             {[]string{"--route", "/x"}, "--api-key is required"},
		"no_route":           {[]string{"--api-key", "k"}, "--route is required"},
		"bad_url":            {append(httpArgs, "--url", "127.0.0.1:8080"), "--url"},
		"relative_ref":       {append(httpArgs, "--reference", "healthz"), "--reference"},
		"negative_cost":      {append(httpArgs, "--cost", "-1"), "--cost"},
		"unknown_target":     {append(httpArgs, "--target", "ftp"), "--target"},
		"negative_rate":      {append(httpArgs, "--rate", "-5"), "--rate"},
		"no_concurrency":     {append(httpArgs, "--concurrency", "0"), "--concurrency"},
		"zero_duration":      {append(httpArgs, "--duration", "0s"), "--duration"},
		"no_subjects":        {append(httpArgs, "--subjects", "0"), "--subjects"},
		"hot_above_one":      {append(httpArgs, "--hot", "1.5"), "--hot"},
		"bad_metrics_url":    {append(httpArgs, "--metrics-url", "localhost/metrics"), "--metrics-url"},
		"no_domain":          {[]string{"--target", "envoy"}, "--domain is required"},
		"bad_grpc_addr":      {append(envoyArgs, "--grpc-addr", "8081"), "--grpc-addr"},
		"no_grpc_conns":      {append(envoyArgs, "--grpc-conns", "0"), "--grpc-conns"},
		"huge_cost":          {append(envoyArgs, "--cost", "5000000000"), "hits_addend"},
		"http_reference":     {append(envoyArgs, "--reference", "/ping"), "gRPC health check"},
		"entry_no_value":     {append(envoyArgs, "--descriptor", "api,user"), `entry "api" has no value`},
		"entry_no_key":       {append(envoyArgs, "--descriptor", "=v,user"), "no key"},
		"subject_key_unused": {append(envoyArgs, "--descriptor", "api=orders"), `--subject-key "user"`},
		"no_descriptor":      {append(envoyArgs, "--subject-key", ""), "--descriptor"},
		"overload_no_rate":   {append(httpArgs, "--overload"), "set --rate"},
		"overload_factor":    {append(httpArgs, "--overload", "--rate", "10", "--step-factor", "1"), "--step-factor"},
		"overload_max_rate":  {append(httpArgs, "--overload", "--rate", "10", "--max-rate", "5"), "--max-rate"},
		"overload_step":      {append(httpArgs, "--overload", "--rate", "10", "--step-duration", "0s"), "--step-duration"},
		"overload_p99":       {append(httpArgs, "--overload", "--rate", "10", "--p99-limit", "0s"), "--p99-limit"},
	} {
		err := benchConfigFor(t, c.args...).validate()
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want a message about %s", name, err, c.says)
		}
	}
	for _, good := range [][]string{
		httpArgs,
		envoyArgs,
		append(envoyArgs, "--descriptor", "api=orders,user", "--descriptor", "tier=free", "--reference", ""),
		append(envoyArgs, "--descriptor", "api=orders", "--subject-key", ""),
		append(httpArgs, "--overload", "--rate", "100", "--metrics-url", "none"),
	} {
		if err := benchConfigFor(t, good...).validate(); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

// TestBenchReportsChecksAndReference runs sluice bench against a server that
// allows even subjects' checks and denies the rest, with /healthz as the
// reference.
func TestBenchReportsChecksAndReference(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/check":
			if r.Header.Get("X-API-Key") != "sk_bench" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			var buf bytes.Buffer
			buf.ReadFrom(r.Body)
			switch {
			case strings.Contains(buf.String(), `"subject":"hot"`):
				w.WriteHeader(http.StatusTooManyRequests)
			case strings.Contains(buf.String(), `"subject":"subject-1"`):
				http.Error(w, `{"error":{"code":"overloaded","message":"busy"}}`, http.StatusServiceUnavailable)
			}
		case "/healthz":
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	var out, progress bytes.Buffer
	cfg := benchConfigFor(t, "--url", srv.URL, "--api-key", "sk_bench", "--route", "/x", "--concurrency", "2",
		"--duration", "100ms", "--subjects", "10", "--hot", "0.5")
	if err := runBench(context.Background(), cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POST /v1/check /x", "GET /healthz (reference)", "check / reference:", "shed as overloaded"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The fake serves no /metrics: CPU is left out with the reason, and the
	// run goes on; asked for explicitly, the page must be there.
	if !strings.Contains(progress.String(), "CPU per check not measured") || !strings.Contains(progress.String(), "HTTP 404") {
		t.Fatalf("no note on the missing metrics: %q", progress.String())
	}
	explicit := cfg
	explicit.MetricsURL, explicit.MetricsURLSet = srv.URL+"/metrics", true
	if err := runBench(context.Background(), explicit, &out, &progress); err == nil || !strings.Contains(err.Error(), "--metrics-url") {
		t.Fatalf("an explicit --metrics-url without the metric must stop the run, got %v", err)
	}
	cfg.APIKey = "wrong"
	if err := runBench(context.Background(), cfg, &out, &progress); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("a wrong key must stop the run with the reason, got %v", err)
	}
}

// startEnvoyServe starts sluice serve in process with the Envoy rate limit
// service on a loopback gRPC port: user keys get 2 requests an hour.
func startEnvoyServe(t *testing.T) (httpAddr, grpcAddr string) {
	t.Helper()
	grpcAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := serveConfig{Addr: "127.0.0.1:0", GRPCAddr: grpcAddr, EnvoyConfig: envoyTestDir(t, envoyTestConfig),
		Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"), AdminToken: "bench-test-admin-token-0123456789abcdef",
		StoreTimeout: guard.DefaultTimeout, DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, cfg, &testenv.Buffer{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-svc.done
	})
	return svc.Addr, grpcAddr
}

// TestBenchEnvoyAgainstServe loads a real sluice serve's gRPC rate limit
// service: with 5 subjects at 2 an hour, 10 checks are allowed (the probe's
// subject aside) and the rest denied; OVER_LIMIT is no failure, and the
// server's /metrics gives CPU per check for the check and the reference.
func TestBenchEnvoyAgainstServe(t *testing.T) {
	httpAddr, grpcAddr := startEnvoyServe(t)
	cfg := benchConfigFor(t, "--target", "envoy", "--grpc-addr", grpcAddr, "--url", "http://"+httpAddr,
		"--domain", "api", "--descriptor", "user", "--subjects", "5", "--concurrency", "4", "--duration", "300ms", "--json")
	var out, progress bytes.Buffer
	if err := runBench(context.Background(), cfg, &out, &progress); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var reports []loadgen.Report
	if err := json.Unmarshal(out.Bytes(), &reports); err != nil || len(reports) != 2 {
		t.Fatalf("%v: %s", err, out.String())
	}
	check, ref := reports[0], reports[1]
	if check.Target != "ShouldRateLimit api" || check.Allowed != 10 || check.Denied == 0 || check.Failed != 0 || check.Shed != 0 {
		t.Fatalf("check: %+v", check)
	}
	if ref.Allowed == 0 || ref.Failed != 0 || !strings.Contains(ref.Target, "health") {
		t.Fatalf("reference: %+v", ref)
	}
	for _, r := range reports {
		if r.CPUMicrosPerCheck == nil || *r.CPUMicrosPerCheck <= 0 || r.CPUError != "" {
			t.Fatalf("%s: no CPU per check: %+v", r.Target, r)
		}
	}
}

// TestBenchOverloadAgainstServe runs a short --overload search against the
// real gRPC service and checks the report's shape, not its figures.
func TestBenchOverloadAgainstServe(t *testing.T) {
	httpAddr, grpcAddr := startEnvoyServe(t)
	cfg := benchConfigFor(t, "--target", "envoy", "--grpc-addr", grpcAddr, "--url", "http://"+httpAddr,
		"--domain", "api", "--descriptor", "user", "--overload", "--rate", "100", "--step-factor", "2",
		"--max-rate", "400", "--step-duration", "200ms", "--p99-limit", "1m", "--concurrency", "4")
	var out, progress bytes.Buffer
	if err := runBench(context.Background(), cfg, &out, &progress); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	// 100, 200, 400/s, all healthy (the p99 limit is out of reach, so a
	// loaded test machine cannot fail a step); 800 would pass --max-rate.
	for _, want := range []string{"offered/s", "cpu µs/check", "edge: at least 400/s", "--max-rate"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s\nprogress:\n%s", want, out.String(), progress.String())
		}
	}
	if strings.Count(progress.String(), "step ") != 3 {
		t.Fatalf("want 3 steps reported as they finish:\n%s", progress.String())
	}
}
