package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// proxyMode is what a faultProxy does with connections.
type proxyMode int

const (
	// proxyPass forwards bytes both ways.
	proxyPass proxyMode = iota
	// proxyRefuse resets every new connection as soon as it is accepted.
	proxyRefuse
	// proxyHang accepts new connections and forwards nothing, on new and
	// existing connections alike, until the mode changes: a partition, or
	// a server frozen with its sockets open.
	proxyHang
)

// faultProxy is a TCP proxy between sluice and PostgreSQL that the test
// controls.
type faultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  proxyMode
	open  chan struct{} // closed while the mode is not proxyHang
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.setMode(proxyPass)
		p.drop()
		p.wg.Wait()
	})
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) setMode(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m == proxyHang && p.mode != proxyHang {
		p.open = make(chan struct{})
	}
	if m != proxyHang && p.mode == proxyHang {
		close(p.open)
	}
	p.mode = m
}

// drop resets every connection open through the proxy.
func (p *faultProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		reset(c)
	}
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST rather than FIN
	}
	_ = c.Close()
}

func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// gate returns a channel that is closed while bytes may flow.
func (p *faultProxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		if mode == proxyRefuse {
			reset(c)
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *faultProxy) serve(c net.Conn) {
	p.track(c)
	defer p.untrack(c)
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(c)
		return
	}
	p.track(up)
	defer p.untrack(up)
	defer up.Close()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(up, c) })
	wg.Go(func() { p.pipe(c, up) })
	wg.Wait()
}

// pipe copies from src to dst, holding each chunk while the proxy hangs,
// and closes both ends when either side ends.
func (p *faultProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// countedRule is a rule on route with one fixed window of limit per hour.
func countedRule(route, mode string, limit int) map[string]any {
	return map[string]any{"route": route, "failure_mode": mode, "limits": []any{
		map[string]any{"name": "hourly", "algorithm": "fixed_window", "limit": limit, "window": "1h"}}} // faultWindow
}

// adminCall is one admin call with its own client, so a call that hangs is
// measured rather than failing the test by itself.
type adminCall struct {
	status int
	code   string
	took   time.Duration
	err    error
}

func callAdmin(in *instance, method, path string, body any, timeout time.Duration) adminCall {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, in.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	start := time.Now()
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	c := adminCall{took: time.Since(start), err: err}
	if err != nil {
		return c
	}
	defer resp.Body.Close()
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &b)
	c.status, c.code, c.took = resp.StatusCode, b.Error.Code, time.Since(start)
	return c
}

// adminBound is how long an admin call may take to fail while the catalog
// database is unreachable.
const adminBound = 5 * time.Second

// postgresFaultRig is two instances on one Redis and, through a proxy, one
// PostgreSQL: A carries the load and the admin calls, B shows whether a
// change propagates once the database is back.
func postgresFaultRig(t *testing.T) (*faultRig, *instance, *faultProxy) {
	t.Helper()
	redis := testenv.Redis(t)
	u, err := url.Parse(testenv.Postgres(t))
	if err != nil || u.Host == "" {
		t.Fatalf("%s must be a URL DSN for the proxy scenarios: %v", testenv.PostgresEnv, err)
	}
	proxy := startFaultProxy(t, u.Host)
	u.Host = proxy.addr()
	dsn := u.String()
	// Redis is healthy here: a generous store deadline keeps a CPU-starved
	// machine from opening the breaker and blurring what is measured.
	// Admin calls get a deadline well inside adminBound.
	rig := startFaultRig(t, redis.URL(), dsn, "--store-timeout", "500ms", "--admin-timeout", "2s")
	addr := freeAddr(t)
	b := startServe(t, t.TempDir(), addr, nil, "--addr", addr, "--redis", redis.URL(), "--database", dsn, "--admin-token", adminToken)
	waitForRule(t, b, rig.key, "/closed/x", "closed")
	return rig, b, proxy
}

// startAdminCalls makes admin calls while the database is unreachable, in
// the background; the returned function waits for them and reports those
// that did not fail with 500 or 503 within adminBound, and the status of the
// rule PUT (0 if it got no answer).
func startAdminCalls(t *testing.T, in *instance, what string) func() (failures []string, put int) {
	t.Helper()
	calls := []struct {
		method, path string
		body         any
	}{
		{"PUT", "/v1/tenants/acme/rules/during", countedRule("/during*", "closed", 1)},
		{"GET", "/v1/tenants/acme/rules", nil},
		{"POST", "/v1/tenants/acme/keys", map[string]any{"name": "during", "role": "check"}},
	}
	results := make([]adminCall, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { results[i] = callAdmin(in, c.method, c.path, c.body, adminBound+3*time.Second) })
	}
	return func() (failures []string, put int) {
		wg.Wait()
		for i, c := range calls {
			r := results[i]
			var bad string
			switch {
			case r.err != nil:
				bad = fmt.Sprintf("%s: %s %s: no answer after %v: %v", what, c.method, c.path, r.took.Round(time.Millisecond), r.err)
			case r.took > adminBound:
				bad = fmt.Sprintf("%s: %s %s answered %d after %v, over the %v bound", what, c.method, c.path, r.status, r.took.Round(time.Millisecond), adminBound)
			case r.status != http.StatusInternalServerError && r.status != http.StatusServiceUnavailable:
				bad = fmt.Sprintf("%s: %s %s: %d %s, want 500 or 503", what, c.method, c.path, r.status, r.code)
			}
			if bad != "" {
				failures = append(failures, bad)
			}
			t.Logf("%s: %s %s: %d %s in %v", what, c.method, c.path, r.status, r.code, r.took.Round(time.Millisecond))
		}
		return failures, results[0].status
	}
}

// assertCatalogRecovers waits for admin calls to work again, checks that the
// rule PUT during the outage exists only if it was acknowledged (put is its
// status), then changes a rule through A and waits for B to apply it.
func assertCatalogRecovers(t *testing.T, rig *faultRig, b *instance, healed time.Time, put int) {
	t.Helper()
	var ok time.Time
	testenv.Eventually(t, 10*time.Second, "admin calls work again after the database is back", func() bool {
		r := callAdmin(rig.in, "GET", "/v1/tenants/acme/rules", nil, 2*time.Second)
		if r.err == nil && r.status == http.StatusOK {
			ok = time.Now()
			return true
		}
		return false
	})
	t.Logf("admin calls work again %v after the database is back", ok.Sub(healed).Round(time.Millisecond))
	want := http.StatusNotFound
	if put == http.StatusCreated {
		want = http.StatusOK
	}
	if r := callAdmin(rig.in, "GET", "/v1/tenants/acme/rules/during", nil, 2*time.Second); r.status != want {
		t.Errorf("the rule PUT during the outage answered %d; GET of it answers %d %v afterwards, want %d", put, r.status, r.err, want)
	}
	rig.in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/after", adminToken, countedRule("/after*", "closed", 1))
	changed := time.Now()
	waitForRule(t, b, rig.key, "/after/x", "after")
	t.Logf("a rule changed through A after the outage reached B in %v", time.Since(changed).Round(time.Millisecond))
}

// TestFaultPostgresRefusing cuts the catalog database off: the proxy resets
// every open connection and every new one for 3s. Checks keep being
// answered by Redis from the catalog snapshot; admin calls fail with 5xx
// within a bound and change nothing; afterwards admin calls work and a rule
// change reaches the other instance.
func TestFaultPostgresRefusing(t *testing.T) {
	scenario(t)
	rig, b, proxy := postgresFaultRig(t)
	l := rig.startLoad()
	time.Sleep(300 * time.Millisecond)

	proxy.setMode(proxyRefuse)
	proxy.drop()
	start := time.Now()
	admin := startAdminCalls(t, rig.in, "database refusing")
	logReady(t, rig.in, "database refusing")
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	failures, put := admin()
	for _, f := range failures {
		t.Error(f)
	}
	proxy.setMode(proxyPass)
	healed := time.Now()
	assertCatalogRecovers(t, rig, b, healed, put)
	l.exhaustHot()
	verify(t, l.finish(), fault{storeOnly: true, latencyBound: 1500 * time.Millisecond})
}

// TestFaultPostgresHanging freezes the catalog database's connections: the
// proxy forwards nothing on open connections and accepts new ones without
// forwarding, for 3s (a partition: no reset, no close). Checks keep being
// answered by Redis from the snapshot; admin calls must fail with 5xx within
// a bound rather than hang; afterwards admin calls work and a rule change
// reaches the other instance.
func TestFaultPostgresHanging(t *testing.T) {
	scenario(t)
	rig, b, proxy := postgresFaultRig(t)
	l := rig.startLoad()
	time.Sleep(300 * time.Millisecond)

	proxy.setMode(proxyHang)
	start := time.Now()
	admin := startAdminCalls(t, rig.in, "database hanging")
	logReady(t, rig.in, "database hanging")
	// Longer than adminBound, so a call still waiting at the bound is
	// waiting on the database, not answered because it came back.
	time.Sleep(time.Until(start.Add(adminBound + time.Second)))
	proxy.setMode(proxyPass)
	healed := time.Now()
	failures, put := admin()
	assertCatalogRecovers(t, rig, b, healed, put)
	l.exhaustHot()
	verify(t, l.finish(), fault{storeOnly: true, latencyBound: 1500 * time.Millisecond})
	for _, f := range failures {
		t.Error(f)
	}
}

// logReady checks /readyz during a catalog outage. DESIGN.md: "a catalog
// outage alone does not make the fleet unready".
func logReady(t *testing.T, in *instance, what string) {
	t.Helper()
	r := callAdmin(in, "GET", "/readyz", nil, 10*time.Second)
	t.Logf("%s: /readyz %d %s in %v", what, r.status, r.code, r.took.Round(time.Millisecond))
	if r.status != http.StatusOK {
		t.Errorf("%s: /readyz answered %d %s; a catalog outage alone must not make an instance unready", what, r.status, r.code)
	}
}
