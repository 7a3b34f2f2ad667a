package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestServeMountsTheConsole: on --addr by default, nowhere with
// --console=false, and only on its own listener with --console-addr.
func TestServeMountsTheConsole(t *testing.T) {
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	consoleAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	for _, tc := range []struct {
		name          string
		console       bool
		consoleAddr   string
		onAddr, onOwn bool
	}{
		{"default", true, "", true, false},
		{"off", false, "", false, false},
		{"own listener", true, consoleAddr, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
				AdminToken: "console-serve-admin-token-0123456789", StoreTimeout: guard.DefaultTimeout,
				DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info",
				Console: tc.console, ConsoleAddr: tc.consoleAddr}
			ctx, cancel := context.WithCancel(context.Background())
			svc, err := startService(ctx, cfg, &testenv.Buffer{})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			defer func() { cancel(); <-svc.done }()
			status, body := get("http://" + svc.Addr + "/console/")
			if got := status == http.StatusOK && strings.Contains(body, `id="secret"`); got != tc.onAddr {
				t.Errorf("console on --addr: %d %.80q, want served %v", status, body, tc.onAddr)
			}
			if tc.consoleAddr != "" {
				status, body := get("http://" + tc.consoleAddr + "/console/")
				if status != http.StatusOK || !strings.Contains(body, `id="secret"`) {
					t.Errorf("console on --console-addr: %d %.80q", status, body)
				}
			}
		})
	}
}

func TestServeRefusesConflictingConsoleFlags(t *testing.T) {
	base := serveConfig{Addr: "127.0.0.1:18181", Database: "sqlite://" + filepath.Join(t.TempDir(), "x.db"),
		StoreTimeout: guard.DefaultTimeout, DefaultFailureMode: "closed", LogLevel: "info", Console: true}
	for _, tc := range []struct {
		name    string
		change  func(*serveConfig)
		wantErr string
	}{
		{"addr_while_off", func(c *serveConfig) { c.Console, c.ConsoleAddr = false, "127.0.0.1:18182" }, "--console=false"},
		{"same_listener", func(c *serveConfig) { c.ConsoleAddr = c.Addr }, "--console-addr 127.0.0.1:18181 is --addr too"},
		{"signin_failures_not_a_limit", func(c *serveConfig) { c.ConsoleSignInFailures = "ten" }, `--console-signin-failures "ten": missing '/'`},
		{"signin_failures_zero_window", func(c *serveConfig) { c.ConsoleSignInFailures = "10/0s" }, `--console-signin-failures`},
		{"trusted_proxy_not_an_address", func(c *serveConfig) { c.TrustedProxies = []string{"proxy.internal"} }, `--trusted-proxies: "proxy.internal" is neither a network`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.change(&cfg)
			if _, err := startService(context.Background(), cfg, &testenv.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
