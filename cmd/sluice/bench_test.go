package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
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
func benchConfigFor(t *testing.T, args ...string) loadgen.Config {
	t.Helper()
	cfg := loadgen.DefaultConfig()
	f := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	addBenchFlags(f, &cfg)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg.MetricsURLSet = f.Changed("metrics-url")
	return cfg
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
	if err := loadgen.Bench(context.Background(), cfg, &out, &progress); err != nil {
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
	if err := loadgen.Bench(context.Background(), cfg, &out, &progress); err != nil {
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

// TestBenchFlags checks that sluice bench's flags fill the configuration:
// the defaults are loadgen's, and a mistake is refused before any load.
func TestBenchFlags(t *testing.T) {
	if got := benchConfigFor(t); !reflect.DeepEqual(got, loadgen.DefaultConfig()) {
		t.Fatalf("bare sluice bench: %+v, want loadgen.DefaultConfig() %+v", got, loadgen.DefaultConfig())
	}
	cfg := benchConfigFor(t, "--api-key", "k", "--route", "/x", "--rate", "-5")
	if err := loadgen.Bench(context.Background(), cfg, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--rate") {
		t.Fatalf("--rate -5: got %v", err)
	}
}
