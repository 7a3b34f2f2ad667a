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

// TestGatewayCommandServesAndReloads: sluice gateway serves health and
// metrics on its admin listener only, and reloads its file when it changes
// (an edit in place, a Kubernetes ConfigMap's symlink swap) and on SIGHUP,
// keeping the running configuration when the new one is invalid.
func TestGatewayCommandServesAndReloads(t *testing.T) {
	upstream := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	one, two, three := upstream("one"), upstream("two"), upstream("three")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	adminAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	config := func(up string) string {
		return fmt.Sprintf("listen: %q\nadmin_listen: %q\nroutes:\n  - {name: api, path_prefix: /api, upstream: %q, limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]}\n", addr, adminAddr, up)
	}
	// A mounted ConfigMap: gateway.yaml -> ..data/gateway.yaml, and
	// ..data -> the current version's directory.
	dir := t.TempDir()
	version := func(name, body string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "gateway.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", config(one.URL))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.Symlink(filepath.Join("..data", "gateway.yaml"), path); err != nil {
		t.Fatal(err)
	}
	editInPlace := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "..v1", "gateway.yaml"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

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
	awaitReload := func(what string) error {
		t.Helper()
		select {
		case err := <-reloaded:
			return err
		case <-time.After(20 * time.Second): // generous: the reload is what is tested, not its speed
			t.Fatalf("%s: no reload", what)
			return nil
		}
	}

	get := func(base, p string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + base + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 10*time.Second, "the gateway is healthy", func() bool {
		code, _ := get(adminAddr, "/healthz")
		return code == 200
	})
	if code, body := get(addr, "/api"); code != 200 || body != "one" {
		t.Fatalf("before reload: %d %q", code, body)
	}
	if _, body := get(adminAddr, "/metrics"); !strings.Contains(body, `sluice_decisions_total{domain="",result="allowed",rule="api",source="gateway",tenant=""} 1`) {
		t.Fatalf("/metrics lacks the decision:\n%s", body)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		if code, _ := get(addr, p); code != http.StatusNotFound {
			t.Errorf("GET %s on the public listener: %d, want 404 (it is on admin_listen only)", p, code)
		}
	}

	editInPlace("routes: [{name: api, path_prefix: /api, upstream: 'not a url'}]\n")
	if err := awaitReload("invalid edit"); err == nil || !strings.Contains(err.Error(), "upstream") {
		t.Fatalf("invalid config reload: err = %v, want one naming upstream", err)
	}
	if code, body := get(addr, "/api"); code != 200 || body != "one" {
		t.Fatalf("after a refused reload: %d %q, want the old config still serving", code, body)
	}

	editInPlace(config(two.URL))
	if err := awaitReload("edit in place"); err != nil {
		t.Fatal(err)
	}
	if code, body := get(addr, "/api"); code != 200 || body != "two" {
		t.Fatalf("after an edit in place: %d %q", code, body)
	}

	// Kubernetes' update: a new version directory, then ..data swapped to
	// it by renaming a new symlink over it.
	version("..v2", config(three.URL))
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := awaitReload("symlink swap"); err != nil {
		t.Fatal(err)
	}
	if code, body := get(addr, "/api"); code != 200 || body != "three" {
		t.Fatalf("after a ConfigMap symlink swap: %d %q", code, body)
	}

	reload <- os.Interrupt
	if err := awaitReload("SIGHUP"); err != nil {
		t.Fatal(err)
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
	config := fmt.Sprintf("listen: %q\nadmin_listen: 127.0.0.1:%d\nserver: {read_header_timeout: 100ms}\nroutes: [{name: api, path_prefix: /api, upstream: 'http://127.0.0.1:9'}]\n",
		addr, testenv.FreePort(t))
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

// TestGatewayCommandAccessLog: with access_log in its file, sluice gateway
// writes JSON access records on its log, and logs a refused token without
// the token; no line holds a credential.
func TestGatewayCommandAccessLog(t *testing.T) {
	t.Setenv("GW_CMD_SECRET", "a-gateway-command-secret-of-32-bytes!")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	adminAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	config := fmt.Sprintf(`listen: %q
admin_listen: %q
access_log: {enabled: true, sample: 1}
jwt: {main: {hs256_secret_env: GW_CMD_SECRET}}
routes:
  - {name: private, path_prefix: /private, upstream: %[3]q, auth: main}
  - {name: keyed, path_prefix: /keyed, upstream: %[3]q, key: {header: X-API-Key}, limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]}
`, addr, adminAddr, up.URL)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	log, err := newLogger(&logs, "info")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, gatewayFlags{Config: path, ShutdownTimeout: 5 * time.Second}, log, nil, nil)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runGateway: %v", err)
		}
	}()

	const token, apiKey = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.bm90LWEtcmVhbC1zaWduYXR1cmU", "ak_cmd_key-never-in-a-log"
	send := func(target, header, value string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+target, nil)
		req.Header.Set(header, value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, 10*time.Second, "the gateway answers", func() bool {
		return send("/keyed/a", "X-API-Key", apiKey) == http.StatusOK
	})
	if code := send("/private/b", "Authorization", "Bearer "+token); code != http.StatusUnauthorized {
		t.Fatalf("a forged token: status %d, want 401", code)
	}
	testenv.Eventually(t, 10*time.Second, "the 401's access record", func() bool {
		return strings.Contains(logs.String(), `"msg":"access","route":"private"`)
	})
	all := logs.String()
	for _, want := range []string{`"msg":"access","route":"keyed","method":"GET","status":200`, `"key":"header:X-Api-Key"`,
		`"msg":"authentication failed","api":"gateway","route":"private","method":"GET","reason":"signature","credential":"bearer"`} {
		if !strings.Contains(all, want) {
			t.Errorf("the log lacks %s:\n%s", want, all)
		}
	}
	for _, secret := range []string{token, token[strings.LastIndexByte(token, '.')+1:], apiKey, "/keyed/a", "/private/b"} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds %q:\n%s", secret, all)
		}
	}
}

// TestGatewayCommandOpensTheStoreOfItsFile: sluice gateway opens the store
// its file names and hands it to the gateway: with redis, two gateways
// share one set of counters; without, each counts in a memory store of its
// own. /readyz reports the store it opened.
func TestGatewayCommandOpensTheStoreOfItsFile(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) string
		// third is the status of the third request, the first through the
		// second gateway, against a limit of two.
		third int
	}{
		{"redis_shared", func(t *testing.T) string { return "redis: " + testenv.Redis(t).URL() + "\n" }, http.StatusTooManyRequests},
		{"memory_per_process", func(*testing.T) string { return "" }, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.redis(t)
			start := func() (addr, adminAddr string) {
				addr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
				adminAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
				path := filepath.Join(t.TempDir(), "gateway.yaml")
				config := fmt.Sprintf("listen: %q\nadmin_listen: %q\n%sroutes:\n  - {name: api, path_prefix: /api, upstream: %q, failure_mode: closed, limits: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}\n",
					addr, adminAddr, store, up.URL)
				if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- runGateway(ctx, gatewayFlags{Config: path, ShutdownTimeout: 5 * time.Second},
						slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
				}()
				t.Cleanup(func() {
					cancel()
					if err := <-done; err != nil {
						t.Errorf("runGateway: %v", err)
					}
				})
				testenv.Eventually(t, 10*time.Second, "the gateway is ready", func() bool {
					resp, err := http.Get("http://" + adminAddr + "/readyz")
					if err != nil {
						return false
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"store":"ok"`)
				})
				return addr, adminAddr
			}
			status := func(addr string) int {
				t.Helper()
				resp, err := http.Get("http://" + addr + "/api")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			one, _ := start()
			two, _ := start()
			for i := range 2 {
				if code := status(one); code != http.StatusOK {
					t.Fatalf("request %d through the first gateway: %d, want 200", i, code)
				}
			}
			if code := status(two); code != tc.third {
				t.Fatalf("third request, through the second gateway: %d, want %d", code, tc.third)
			}
		})
	}
}
