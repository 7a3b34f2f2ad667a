package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/gateway"
)

func TestGatewayConcurrencyPerRoute(t *testing.T) {
	inside, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "" {
			inside <- struct{}{}
			<-release
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	_, gw := startGateway(t, fmt.Sprintf(`
routes:
  - name: uploads
    path_prefix: /upload
    upstream: %s
    concurrency: {limit: 1, ttl: 1m}
`, up.URL))

	first := make(chan int)
	go func() {
		resp, err := http.Get(gw.URL + "/upload?wait=1")
		if err != nil {
			t.Error(err)
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-inside
	r := do(t, "GET", gw.URL+"/upload", nil)
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.header.Get("RateLimit-Policy"), `qu="concurrent-requests"`) {
		t.Fatalf("second upload while the first runs: %d %v, want 429 with a concurrent-requests policy", r.status, r.header)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first upload: %d", code)
	}
	if r := do(t, "GET", gw.URL+"/upload", nil); r.status != http.StatusOK {
		t.Fatalf("after the first finished: %d, want 200 (its lease released)", r.status)
	}
}

func TestGatewayCostByResponseBytes(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 1000)))
	}))
	t.Cleanup(up.Close)
	_, gw := startGateway(t, fmt.Sprintf(`
routes:
  - name: files
    path_prefix: /files
    upstream: %s
    limits: [{name: bytes, algorithm: fixed_window, limit: 10000, window: 1h}]
    cost: 4096
    cost_by: response_bytes
`, up.URL))
	first := do(t, "GET", gw.URL+"/files/a", nil)
	if first.status != http.StatusOK || first.header.Get("X-RateLimit-Remaining") != "5904" {
		t.Fatalf("first: %d, remaining %q; want 200 with 4096 reserved (5904 left)", first.status, first.header.Get("X-RateLimit-Remaining"))
	}
	// The first response had 1000 bytes: settled at 1000, so 9000 were left
	// before the second reserved its 4096.
	second := do(t, "GET", gw.URL+"/files/b", nil)
	if second.header.Get("X-RateLimit-Remaining") != "4904" {
		t.Fatalf("second: remaining %q, want 4904", second.header.Get("X-RateLimit-Remaining"))
	}
}

func TestGatewayRefusesBadHoldConfig(t *testing.T) {
	for _, route := range []string{
		`concurrency: {limit: 0, ttl: 1m}`,
		`concurrency: {limit: 2}`,
		`cost_by: response_bytes`,
		"cost: 10\n    cost_by: rows",
	} {
		yaml := fmt.Sprintf(`
routes:
  - name: r
    path_prefix: /r
    upstream: http://127.0.0.1:1
    limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]
    %s
`, route)
		if _, err := gateway.ParseConfig([]byte(yaml)); err == nil {
			t.Errorf("%q was accepted", route)
		}
	}
}
