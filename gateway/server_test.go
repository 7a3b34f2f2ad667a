package gateway_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicelabs/sluice/gateway"
)

// serveLimited serves the YAML config through gateway.NewServer, as
// `sluice gateway` does, and returns its address.
func serveLimited(t *testing.T, yamlConfig string) string {
	t.Helper()
	cfg, gw := newGateway(t, yamlConfig)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.NewServer(cfg, gw, nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		gw.Close()
	})
	return ln.Addr().String()
}

// closedWithin reads from conn until the server closes it, and fails unless
// that happens within limit.
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(start.Add(limit + 2*time.Second))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open after %v", time.Since(start))
	}
	if took := time.Since(start); took > limit {
		t.Fatalf("the connection was closed after %v, want within %v", took, limit)
	}
}

func TestGatewayServerLimits(t *testing.T) {
	keys(t)
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	addr := serveLimited(t, fmt.Sprintf(`
server:
  read_header_timeout: 100ms
  read_timeout: 200ms
  write_timeout: 2s
  idle_timeout: 200ms
  max_header_bytes: 16384
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET}
routes:
  - {name: api, path_prefix: /api, upstream: %q, timeout: 1s}
  - {name: auth, path_prefix: /auth, upstream: %q, auth: main, timeout: 1s}
`, up.URL, up.URL))
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	t.Run("slow_headers_are_cut_off", func(t *testing.T) {
		conn := dial(t)
		io.WriteString(conn, "GET /api HTTP/1.1\r\nHost: gateway.test\r\n")
		closedWithin(t, conn, time.Second)
	})
	t.Run("slow_body_is_cut_off", func(t *testing.T) {
		conn := dial(t)
		io.WriteString(conn, "POST /api HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 100000\r\n\r\nfirst bytes")
		// The rest never comes: read_timeout, not the route's timeout or
		// the client's patience, ends the request.
		closedWithin(t, conn, time.Second)
	})
	t.Run("idle_connection_is_closed", func(t *testing.T) {
		conn := dial(t)
		io.WriteString(conn, "GET /api HTTP/1.1\r\nHost: gateway.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		closedWithin(t, conn, time.Second)
	})
	t.Run("oversized_headers_get_431", func(t *testing.T) {
		before := up.hits.Load()
		conn := dial(t)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /api HTTP/1.1\r\nHost: gateway.test\r\nX-Padding: %s\r\n\r\n", strings.Repeat("a", 64<<10))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("64 KiB of headers over a 16 KiB limit: %d, want 431", resp.StatusCode)
		}
		if up.hits.Load() != before {
			t.Fatal("the request reached the upstream")
		}
	})
	t.Run("oversized_token_is_refused_before_verification", func(t *testing.T) {
		// Validly signed: only its size can refuse it.
		padded := func(n int) string {
			c := claims("alice")
			c["pad"] = strings.Repeat("p", n)
			return sign(t, jwt.SigningMethodHS256, []byte(hsSecret), c, "")
		}
		base := "http://" + addr
		if r := do(t, "GET", base+"/auth", bearer(padded(5000))); r.status != 200 {
			t.Fatalf("a token under 8 KiB: %d %s", r.status, r.body)
		}
		big := padded(9000)
		r := do(t, "GET", base+"/auth", bearer(big))
		if r.status != 401 || !strings.Contains(r.body, fmt.Sprintf("it is %d bytes, over the 8192 this gateway accepts", len(big))) ||
			!strings.Contains(r.header.Get("WWW-Authenticate"), "invalid_token") {
			t.Fatalf("a %d-byte token: %d %v %s, want 401 saying its size", len(big), r.status, r.header, r.body)
		}
	})
}

func TestGatewayServerLimitDefaults(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte("routes: [{name: api, path_prefix: /api, upstream: 'http://h'}]"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.NewServer(cfg, http.NotFoundHandler(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ReadHeaderTimeout != 10*time.Second || srv.ReadTimeout != 60*time.Second || srv.WriteTimeout != 120*time.Second ||
		srv.IdleTimeout != 120*time.Second || srv.MaxHeaderBytes != 32<<10 {
		t.Fatalf("defaults: header %v, read %v, write %v, idle %v, max header bytes %d",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
}

// TestReloadRefusesNewServerLimits: the listener's limits are set once;
// a reload that changed them would report a change that did not happen.
func TestReloadRefusesNewServerLimits(t *testing.T) {
	up := newUpstream(t, "app")
	route := fmt.Sprintf("routes: [{name: api, path_prefix: /api, upstream: %q}]\n", up.URL)
	gw, _ := startGateway(t, route)
	cfg, err := gateway.ParseConfig([]byte("server: {read_timeout: 5m}\n" + route))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Reload(cfg); err == nil || !strings.HasPrefix(err.Error(), "server:") {
		t.Fatalf("changing server limits on reload: err = %v, want a refusal naming server", err)
	}
}
