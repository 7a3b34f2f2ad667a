package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// Starting with a dependency down: a pod must not crash-loop through a Redis
// or PostgreSQL blip. Bounds are generous (the machine is loaded); what is
// asserted is who decides each answer, not how fast.

// recoverBound is how long after Redis or PostgreSQL comes the instance may
// take to use it: the reconnect backoff is capped at 5 s, the breaker's
// probe comes within seconds after, and a loaded machine adds its share.
const recoverBound = 30 * time.Second

// TestServeStartsWithoutRedis starts sluice serve against a Redis port
// nothing listens on: it starts, each rule answers by its failure mode,
// /readyz says the store is connecting; once a redis-server listens there,
// checks are Redis's and /readyz is 200.
func TestServeStartsWithoutRedis(t *testing.T) {
	redis := testenv.Redis(t)
	redis.Stop() // its port stays, nothing listens until Start
	rig := startFaultRig(t, redis.URL(), testenv.Postgres(t))

	for _, mode := range faultModes {
		for i := range faultLimit + 2 { // past the limit: Redis counts nothing
			if s := rig.check(mode, "early"); !s.policyAnswer() {
				t.Fatalf("check %d of rule %s before Redis answers: %v, want the rule's failure mode", i, mode, s)
			}
		}
	}
	r := rig.in.do("GET", "/readyz", "", nil)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "store_unavailable" || !strings.Contains(r.raw, "not connected yet") {
		t.Errorf("/readyz before Redis answers: %d %s, want 503 saying the store has not connected yet", r.status, r.raw)
	}
	logs := rig.in.stderr.String()
	if n := strings.Count(logs, "Redis does not answer; starting without it"); n != 1 {
		t.Errorf("the wait for Redis is logged %d times, want once:\n%s", n, logs)
	}

	redis.Start()
	came := time.Now()
	testenv.Eventually(t, recoverBound, "/readyz 200 once Redis answers", func() bool {
		return rig.in.do("GET", "/readyz", "", nil).status == http.StatusOK
	})
	t.Logf("/readyz 200 %v after Redis listened", time.Since(came).Round(time.Millisecond))
	for _, mode := range faultModes {
		testenv.Eventually(t, recoverBound, "rule "+mode+" decided by Redis", func() bool {
			return rig.check(mode, "probe-"+mode).storeAnswer()
		})
		t.Logf("rule %s decided by Redis %v after Redis listened", mode, time.Since(came).Round(time.Millisecond))
		// Exactly the limit on a fresh subject, counted by Redis.
		for i := range faultLimit + 1 {
			s := rig.check(mode, "counted")
			want := http.StatusOK
			if i == faultLimit {
				want = http.StatusTooManyRequests
			}
			if !s.storeAnswer() || s.status != want {
				t.Fatalf("rule %s, check %d once Redis answers: %v, want %d decided by Redis", mode, i+1, s, want)
			}
		}
	}
	if n := strings.Count(rig.in.stderr.String(), "connected to Redis"); n != 1 {
		t.Errorf("the connection is logged %d times, want once", n)
	}
}

// refusingPostgres returns a DSN of the test's database through a proxy
// that refuses every connection until the test lets it pass.
func refusingPostgres(t *testing.T) (string, *faultProxy) {
	t.Helper()
	u, err := url.Parse(testenv.Postgres(t))
	if err != nil || u.Host == "" {
		t.Fatalf("%s must be a URL DSN for the proxy scenarios: %v", testenv.PostgresEnv, err)
	}
	proxy := startFaultProxy(t, u.Host)
	proxy.setMode(proxyRefuse)
	u.Host = proxy.addr()
	return u.String(), proxy
}

// TestServeWaitsForPostgres starts sluice serve with its catalog database
// unreachable: /healthz answers, /readyz is 503 saying what it waits for,
// and once the database answers the service starts (migrations, admin
// token, first snapshot) and is ready.
func TestServeWaitsForPostgres(t *testing.T) {
	redis := testenv.Redis(t)
	dsn, proxy := refusingPostgres(t)
	addr := freeAddr(t)
	in := launchServe(t, t.TempDir(), addr, nil, "--addr", addr, "--redis", redis.URL(), "--database", dsn, "--admin-token", adminToken)

	testenv.Eventually(t, recoverBound, "the log says it waits for the catalog database", func() bool {
		return strings.Contains(in.stderr.String(), "waiting for the catalog database to answer")
	})
	r := in.do("GET", "/readyz", "", nil)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "starting" || !strings.Contains(r.raw, "catalog database") {
		t.Errorf("/readyz while the database is unreachable: %d %s, want 503 starting, naming the catalog database", r.status, r.raw)
	}
	if strings.Contains(r.raw, "postgres") || strings.Contains(r.raw, proxy.addr()) {
		t.Errorf("/readyz names the database's user or address: %s", r.raw)
	}
	if r := in.do("POST", "/v1/check", "sk_x", map[string]any{"route": "/"}); r.status != http.StatusServiceUnavailable || r.errorCode() != "starting" {
		t.Errorf("a check while starting: %d %s, want 503 starting", r.status, r.raw)
	}
	in.must(http.StatusOK, "GET", "/healthz", "", nil)

	proxy.setMode(proxyPass)
	came := time.Now()
	testenv.Eventually(t, recoverBound, "/readyz 200 once the database answers", func() bool {
		return in.do("GET", "/readyz", "", nil).status == http.StatusOK
	})
	t.Logf("/readyz 200 %v after the database answered", time.Since(came).Round(time.Millisecond))
	key := setupTenant(in, adminToken, "acme")
	in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/all", adminToken, countedRule("*", "closed", 1))
	waitForRule(t, in, key, "/x", "all")
	in.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/x", "subject": "s"})
	in.must(http.StatusTooManyRequests, "POST", "/v1/check", key, map[string]any{"route": "/x", "subject": "s"})
	logs := in.stderr.String()
	if n := strings.Count(logs, "waiting for the catalog database to answer"); n != 1 {
		t.Errorf("the wait is logged %d times, want once (then a reminder a minute):\n%s", n, logs)
	}
	if !strings.Contains(logs, "the catalog database answered; starting") {
		t.Errorf("the end of the wait is not logged:\n%s", logs)
	}
}

// TestServeStopsPromptlyWhileWaitingForPostgres: SIGTERM while the catalog
// is waited for ends the process at once, with status 0.
func TestServeStopsPromptlyWhileWaitingForPostgres(t *testing.T) {
	dsn, _ := refusingPostgres(t)
	addr := freeAddr(t)
	in := launchServe(t, t.TempDir(), addr, nil, "--addr", addr, "--database", dsn, "--admin-token", adminToken)
	testenv.Eventually(t, recoverBound, "the log says it waits for the catalog database", func() bool {
		return strings.Contains(in.stderr.String(), "waiting for the catalog database to answer")
	})
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	select {
	case <-in.exited:
		t.Logf("exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM while waiting for the database did not stop the process within 10 s")
	}
	if code := in.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM while waiting, want 0:\n%s", code, in.stderr)
	}
}

// TestServeRefusesBadDependencyConfigurationAtOnce: only unreachability is
// waited through; a URL that cannot work fails the start with a message.
func TestServeRefusesBadDependencyConfigurationAtOnce(t *testing.T) {
	redis := testenv.Redis(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unparsable Redis URL", []string{"--redis", "redis-sentinel://127.0.0.1:1"}, "master set name"},
		{"Redis refuses the user", []string{"--redis", "redis://nobody:wrong@" + redis.Addr + "/0"}, "refused the connection"},
		{"unparsable database URL", []string{"--database", "postgres://u@127.0.0.1:notaport/db"}, "invalid database address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			cmd := exec.Command(binary, append([]string{"serve", "--addr", addr, "--admin-token", adminToken}, tc.args...)...)
			cmd.Dir = t.TempDir()
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(recoverBound):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("sluice serve did not stop on a bad configuration:\n%s", out)
			}
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %v, output does not say %q:\n%s", err, tc.want, out)
			}
		})
	}
}

// TestGatewayStartsWithoutRedis runs sluice gateway against a Redis port
// nothing listens on: it starts, routes answer by their failure modes,
// /readyz on the admin listener is 503 while a fail-closed route cannot be
// decided; once Redis listens, Redis counts.
func TestGatewayStartsWithoutRedis(t *testing.T) {
	redis := testenv.Redis(t)
	redis.Stop()
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("upstream\n")) })}
	upAddr := freeAddr(t)
	ln, err := net.Listen("tcp", upAddr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { up.Close() })

	listenAddr, adminAddr := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `
listen: %q
admin_listen: %q
redis: %s
routes:
  - {name: open, path_prefix: /open, upstream: "http://%s", failure_mode: open, limits: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}
  - {name: closed, path_prefix: /closed, upstream: "http://%s", failure_mode: closed, limits: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}
`, listenAddr, adminAddr, redis.URL(), upAddr, upAddr), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "gateway", "--config", config)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sluice gateway output:\n%s", out)
		}
	})
	client := &http.Client{Timeout: 10 * time.Second}
	status := func(url string) int {
		resp, err := client.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, recoverBound, "the gateway answers /healthz", func() bool {
		select {
		case <-exited:
			t.Fatalf("sluice gateway exited at start:\n%s", out)
		default:
		}
		return status("http://"+adminAddr+"/healthz") == http.StatusOK
	})
	for i := range 4 {
		if s := status("http://" + listenAddr + "/open"); s != http.StatusOK {
			t.Fatalf("fail-open route, request %d before Redis answers: %d", i+1, s)
		}
		if s := status("http://" + listenAddr + "/closed"); s != http.StatusServiceUnavailable {
			t.Fatalf("fail-closed route, request %d before Redis answers: %d", i+1, s)
		}
	}
	if s := status("http://" + adminAddr + "/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Redis answers: %d, want 503", s)
	}

	redis.Start()
	came := time.Now()
	testenv.Eventually(t, recoverBound, "/readyz 200 once Redis answers", func() bool {
		return status("http://"+adminAddr+"/readyz") == http.StatusOK
	})
	testenv.Eventually(t, recoverBound, "the fail-closed route decided by Redis", func() bool {
		return status("http://"+listenAddr+"/closed") == http.StatusOK
	})
	t.Logf("the fail-closed route decided by Redis %v after Redis listened", time.Since(came).Round(time.Millisecond))
	if s := status("http://" + listenAddr + "/closed"); s != http.StatusOK {
		t.Fatalf("second request once Redis answers: %d", s)
	}
	if s := status("http://" + listenAddr + "/closed"); s != http.StatusTooManyRequests {
		t.Fatalf("third request once Redis answers: %d, want 429 (limit 2, counted by Redis)", s)
	}
}
