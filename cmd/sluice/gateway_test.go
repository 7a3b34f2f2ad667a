package main

import (
	"context"
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

	"github.com/sluicelabs/sluice/internal/testenv"
)

func TestGatewayCommandServesAndReloads(t *testing.T) {
	upstream := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	one, two := upstream("one"), upstream("two")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := func(up string) string {
		return fmt.Sprintf("listen: %q\nroutes:\n  - {name: api, path_prefix: /api, upstream: %q, limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]}\n", addr, up)
	}
	write(config(one.URL))

	ctx, cancel := context.WithCancel(context.Background())
	reload := make(chan os.Signal)
	reloaded := make(chan error)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, gatewayFlags{Config: path, ShutdownTimeout: 5 * time.Second},
			slog.New(slog.NewTextHandler(io.Discard, nil)), reload, func(err error) { reloaded <- err })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runGateway: %v", err)
		}
	}()

	get := func(p string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 10*time.Second, "the gateway is healthy", func() bool {
		code, _ := get("/healthz")
		return code == 200
	})
	if code, body := get("/api"); code != 200 || body != "one" {
		t.Fatalf("before reload: %d %q", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `sluice_decisions_total{domain="",result="allowed",rule="api",source="gateway",tenant=""} 1`) {
		t.Fatalf("/metrics lacks the decision:\n%s", body)
	}

	write("routes: [{name: api, path_prefix: /api, upstream: 'not a url'}]\n")
	reload <- os.Interrupt
	if err := <-reloaded; err == nil || !strings.Contains(err.Error(), "upstream") {
		t.Fatalf("invalid config reload: err = %v, want one naming upstream", err)
	}
	if code, body := get("/api"); code != 200 || body != "one" {
		t.Fatalf("after a refused reload: %d %q, want the old config still serving", code, body)
	}

	write(config(two.URL))
	reload <- os.Interrupt
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if code, body := get("/api"); code != 200 || body != "two" {
		t.Fatalf("after reload: %d %q", code, body)
	}
}

func TestGatewayCommandRequiresConfig(t *testing.T) {
	cmd := newGatewayCmd()
	cmd.SetArgs(nil)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--config is required") {
		t.Fatalf("err = %v", err)
	}
}

// TestGatewayCommandAppliesServerLimits: the listener `sluice gateway` runs
// carries the server limits of its file (issue 10: a client sending its
// headers slowly held a connection for as long as it liked).
func TestGatewayCommandAppliesServerLimits(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	config := fmt.Sprintf("listen: %q\nserver: {read_header_timeout: 100ms}\nroutes: [{name: api, path_prefix: /api, upstream: 'http://127.0.0.1:9'}]\n", addr)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, gatewayFlags{Config: path, ShutdownTimeout: 5 * time.Second},
			slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runGateway: %v", err)
		}
	}()
	var conn net.Conn
	testenv.Eventually(t, 10*time.Second, "the gateway listens", func() bool {
		var err error
		conn, err = net.Dial("tcp", addr)
		return err == nil
	})
	defer conn.Close()
	io.WriteString(conn, "GET /api HTTP/1.1\r\nHost: gateway.test\r\n")
	start := time.Now()
	conn.SetReadDeadline(start.Add(5 * time.Second))
	io.Copy(io.Discard, conn)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a request with unfinished headers held its connection %v; read_header_timeout is 100ms", took)
	}
}
