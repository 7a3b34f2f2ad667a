package e2e

// The overload suite (issue 19): the real sluice binary on a healthy Redis
// while the sluice process itself is short of CPU: frozen (SIGSTOP), beside
// CPU hogs, held to a CPU quota by a cgroup, hit by a burst, and offered
// twice the load it can serve. In every scenario Redis is healthy, so the
// breaker must never open and no answer may be store_unavailable: each
// answer is either the store's decision (late if need be) or an explicit
// shed (503 overloaded with Retry-After, gRPC RESOURCE_EXHAUSTED).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// breakerLog is what sluice serve logs when the store's breaker changes
// state: never, while Redis is healthy.
const breakerLog = "store circuit breaker changed state"

// overloadEnvoyConfig is the Envoy domain of the gRPC scenarios: one
// descriptor per subject, a limit far above what a run can spend.
const overloadEnvoyConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// startOverloadInstance starts one sluice serve on redisURL with its own
// SQLite catalog, an HTTP and a gRPC listener, the tenant "acme" and a
// fail-closed rule "/api*" far above any run's checks. It returns the
// instance, its gRPC address and the tenant's check key.
func startOverloadInstance(t *testing.T, redisURL string) (*instance, string, string) {
	t.Helper()
	dir := t.TempDir()
	envoyDir := filepath.Join(dir, "envoy")
	if err := os.MkdirAll(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(envoyDir, "api.yaml"), []byte(overloadEnvoyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, grpcAddr := freeAddr(t), freeAddr(t)
	in := startServe(t, dir, addr, nil, "--addr", addr, "--grpc-addr", grpcAddr, "--envoy-config", envoyDir,
		"--redis", redisURL, "--database", "sqlite://"+filepath.Join(dir, "sluice.db"), "--admin-token", adminToken)
	key := setupTenant(in, adminToken, "acme")
	in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", adminToken, countedRule("/api*", "closed", 1_000_000_000))
	return in, grpcAddr, key
}

// startHogs runs n processes that spin on the CPU until the test ends: the
// noisy neighbours of a busy node.
func startHogs(t *testing.T, n int) {
	t.Helper()
	for range n {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatalf("start a CPU hog: %v", err)
		}
		t.Cleanup(func() {
			_ = hog.Process.Kill()
			_ = hog.Wait()
		})
	}
}

// benchRun runs `sluice bench` with args (plus --json) and returns its
// reports. The generator is the real binary, not this test process (which
// runs under the race detector).
func benchRun[T any](t *testing.T, args ...string) T {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"bench", "--json", "--reference", ""}, args...)...)
	var out, progress bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &progress
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice bench %s: %v\n%s", strings.Join(args, " "), err, progress.String())
	}
	var reports T
	if err := json.Unmarshal(out.Bytes(), &reports); err != nil {
		t.Fatalf("sluice bench output: %v\n%s", err, out.String())
	}
	return reports
}

// benchFigures is the part of a `sluice bench --json` report these tests
// read.
type benchFigures struct {
	Target     string  `json:"target"`
	Sent       int64   `json:"sent"`
	Allowed    int64   `json:"allowed"`
	Denied     int64   `json:"denied"`
	Shed       int64   `json:"shed"`
	Failed     int64   `json:"failed"`
	Dropped    int64   `json:"dropped"`
	PerSecond  float64 `json:"per_second"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	FirstError string  `json:"first_error"`
}

// closedLoad is a closed-model run of `sluice bench` against in's HTTP check
// API or its gRPC service, on fresh subjects.
func closedLoad(t *testing.T, in *instance, grpcAddr, key, target string, callers int, d time.Duration) benchFigures {
	t.Helper()
	args := []string{"--url", in.url, "--concurrency", strconv.Itoa(callers), "--duration", d.String(), "--subjects", "100000"}
	if target == "envoy" {
		args = append(args, "--target", "envoy", "--grpc-addr", grpcAddr, "--domain", "api", "--descriptor", "user")
	} else {
		args = append(args, "--api-key", key, "--route", "/api/orders")
	}
	reports := benchRun[[]benchFigures](t, args...)
	if len(reports) != 1 {
		t.Fatalf("want one report, got %+v", reports)
	}
	return reports[0]
}

// assertNoBreaker fails the test if in's breaker changed state.
func assertNoBreaker(t *testing.T, in *instance) {
	t.Helper()
	if strings.Contains(in.stderr.String(), breakerLog) {
		t.Errorf("the breaker changed state while Redis was healthy:\n%s", in.stderr)
	}
}

// TestOverloadProcessFrozen (a): SIGSTOP of the sluice process itself for
// 300 ms, six times the store deadline, three times during steady load. The
// checks in flight are answered by Redis when it wakes: no answer is lost,
// none is store_unavailable or shed, and the breaker never opens.
func TestOverloadProcessFrozen(t *testing.T) {
	redis := testenv.Redis(t)
	in, _, key := startOverloadInstance(t, redis.URL())
	const freeze = 300 * time.Millisecond
	var mu sync.Mutex
	statuses := map[string]int{}
	var slowest time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				r := in.do("POST", "/v1/check", key, map[string]any{"route": "/api/orders", "subject": fmt.Sprintf("w%d-%d", w, i)})
				took := time.Since(start)
				mu.Lock()
				statuses[fmt.Sprintf("%d %s degraded=%v", r.status, r.errorCode(), r.body["degraded"])]++
				slowest = max(slowest, took)
				mu.Unlock()
			}
		})
	}
	for range 3 {
		time.Sleep(500 * time.Millisecond)
		if err := in.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(freeze)
		if err := in.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("answers %v; slowest %v", statuses, slowest)
	for s, n := range statuses {
		if s != "200  degraded=false" {
			t.Errorf("%d answers %q, want every check allowed by Redis", n, s)
		}
	}
	if slowest < freeze*8/10 {
		t.Errorf("slowest answer %v: the freezes did not hold up checks in flight", slowest)
	}
	assertNoBreaker(t, in)
}

// TestOverloadCPUHogs (b): two processes spinning on the machine's two
// cores beside sluice serve, then sluice serve held to half a CPU by a
// cgroup quota (50 ms every 100 ms: every period it is throttled for as long
// as the store deadline). A closed-model run of 64 callers on the HTTP and
// on the gRPC face gets every check answered by Redis: nothing failed,
// nothing shed, no breaker.
func TestOverloadCPUHogs(t *testing.T) {
	redis := testenv.Redis(t)
	in, grpcAddr, key := startOverloadInstance(t, redis.URL())
	t.Run("hogs", func(t *testing.T) {
		startHogs(t, 2)
		for _, target := range []string{"http", "envoy"} {
			r := closedLoad(t, in, grpcAddr, key, target, 64, 3*time.Second)
			t.Logf("%s beside 2 CPU hogs: %+v", target, r)
			if r.Failed != 0 || r.Shed != 0 || r.Allowed == 0 || r.Allowed != r.Sent {
				t.Errorf("%s: %d sent, %d allowed, %d shed, %d failed (first error %q): want every check allowed", target, r.Sent, r.Allowed, r.Shed, r.Failed, r.FirstError)
			}
		}
	})
	t.Run("cgroup_cpu_quota", func(t *testing.T) {
		group := cpuQuota(t, in.cmd.Process.Pid, 50*time.Millisecond, 100*time.Millisecond)
		for _, target := range []string{"http", "envoy"} {
			r := closedLoad(t, in, grpcAddr, key, target, 64, 3*time.Second)
			t.Logf("%s at half a CPU: %+v", target, r)
			if r.Failed != 0 || r.Shed != 0 || r.Allowed == 0 || r.Allowed != r.Sent {
				t.Errorf("%s: %d sent, %d allowed, %d shed, %d failed (first error %q): want every check allowed", target, r.Sent, r.Allowed, r.Shed, r.Failed, r.FirstError)
			}
		}
		stat, _ := os.ReadFile(filepath.Join(group, "cpu.stat"))
		t.Logf("%s/cpu.stat: %s", group, strings.Join(strings.Fields(string(stat)), " "))
		if !strings.Contains(string(stat), "nr_throttled") || strings.Contains(string(stat), "nr_throttled 0\n") {
			t.Errorf("sluice serve was never throttled by its quota: the test tested nothing")
		}
	})
	assertNoBreaker(t, in)
}

// cpuQuota puts pid in a new cgroup that may use quota of CPU time every
// period (cgroup v2's cpu.max, or v1's CFS quota), and moves it back to its
// own when the test ends; it returns the group's directory. It skips the
// test with the reason where the machine allows no such cgroup.
func cpuQuota(t *testing.T, pid int, quota, period time.Duration) string {
	t.Helper()
	name := fmt.Sprintf("sluice-e2e-%d", os.Getpid())
	type layout struct{ root, limitFile, limit string }
	var tried []string
	for _, l := range []layout{
		{"/sys/fs/cgroup", "cpu.max", fmt.Sprintf("%d %d", quota.Microseconds(), period.Microseconds())},
		{"/sys/fs/cgroup/unified", "cpu.max", fmt.Sprintf("%d %d", quota.Microseconds(), period.Microseconds())},
		{"/sys/fs/cgroup/cpu", "cpu.cfs_quota_us", strconv.FormatInt(quota.Microseconds(), 10)},
	} {
		if _, err := os.Stat(filepath.Join(l.root, l.limitFile)); err != nil {
			if _, err := os.Stat(filepath.Join(l.root, "cgroup.procs")); err != nil {
				continue
			}
		}
		dir := filepath.Join(l.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", l.root, err))
			continue
		}
		if l.limitFile == "cpu.cfs_quota_us" {
			if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.FormatInt(period.Microseconds(), 10)), 0o644); err != nil {
				tried = append(tried, fmt.Sprintf("%s: %v", dir, err))
				os.Remove(dir)
				continue
			}
		}
		if err := os.WriteFile(filepath.Join(dir, l.limitFile), []byte(l.limit), 0o644); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", dir, err))
			os.Remove(dir)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", dir, err))
			os.Remove(dir)
			continue
		}
		t.Cleanup(func() {
			// Back to the parent, then the empty group can go.
			_ = os.WriteFile(filepath.Join(l.root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
			os.Remove(dir)
		})
		t.Logf("sluice serve in %s with %s=%q", dir, l.limitFile, l.limit)
		return dir
	}
	t.Skipf("this machine allows no cgroup with a CPU quota to be made here (tried: %s)", strings.Join(tried, "; "))
	return ""
}

// TestOverloadBurst (c): 1,000 checks from 200 callers at once over two
// instances sharing one Redis, on one fail-closed rule of capacity 100,
// beside two CPU hogs. Exactly 100 are admitted, every other answer is a
// deny or an explicit shed, none is store_unavailable, and no breaker opens.
func TestOverloadBurst(t *testing.T) {
	startHogs(t, 2)
	inst, _ := startProduction(t, 2)
	a, b := inst[0], inst[1]
	key := setupTenant(a, adminToken, "acme")
	a.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/payments", adminToken, map[string]any{
		"route": "/api/payments*", "failure_mode": "closed",
		"limits": []any{map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": 100, "refill_per_second": 0.0001}},
	})
	waitForRule(t, b, key, "/api/payments/1", "payments")

	const checks, callers = 1000, 200
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range callers {
		in := a
		if c%2 == 1 {
			in = b
		}
		wg.Go(func() {
			<-start
			for i := range checks / callers {
				r := in.do("POST", "/v1/check", key, map[string]any{"route": fmt.Sprintf("/api/payments/%d", c*10+i), "subject": "user-42"})
				answer := strconv.Itoa(r.status)
				if code := r.errorCode(); code != "" {
					answer += " " + code
				}
				if r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
					answer += " without Retry-After"
				}
				mu.Lock()
				answers[answer]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("answers: %v", answers)
	shed := answers["503 overloaded"]
	if answers["200"] != 100 || answers["429"] != checks-100-shed || answers["200"]+answers["429"]+shed != checks {
		t.Errorf("answers %v: want exactly 100 allowed, the rest denied or shed (503 overloaded with Retry-After)", answers)
	}
	assertNoBreaker(t, a)
	assertNoBreaker(t, b)
}

// overloadSearch is `sluice bench --overload --json`'s report.
type overloadSearch struct {
	Edge  float64 `json:"edge"`
	Steps []struct {
		OfferedRate float64 `json:"offered_rate"`
		TwiceEdge   bool    `json:"twice_edge"`
		benchFigures
	} `json:"steps"`
}

// TestOverloadTwiceTheEdge (d): `sluice bench --overload` finds the edge of
// one instance (the highest open-model rate it serves with p99 under 100 ms
// and nothing shed or failed), then offers twice that. At twice the edge
// every check is served or shed, none failed, and the breaker never opens.
func TestOverloadTwiceTheEdge(t *testing.T) {
	redis := testenv.Redis(t)
	in, grpcAddr, key := startOverloadInstance(t, redis.URL())
	for _, target := range []string{"http", "envoy"} {
		t.Run(target, func(t *testing.T) {
			args := []string{"--url", in.url, "--overload", "--rate", "1000", "--step-factor", "1.5", "--step-duration", "2s",
				"--p99-limit", "100ms", "--max-rate", "200000", "--concurrency", "512", "--subjects", "100000"}
			if target == "envoy" {
				args = append(args, "--target", "envoy", "--grpc-addr", grpcAddr, "--domain", "api", "--descriptor", "user")
			} else {
				args = append(args, "--api-key", key, "--route", "/api/orders")
			}
			rep := benchRun[overloadSearch](t, args...)
			var twice bool
			for _, s := range rep.Steps {
				t.Logf("%.0f/s offered: %.0f/s served, %d allowed, %d shed, %d failed, %d dropped, p50 %.1f ms, p99 %.1f ms",
					s.OfferedRate, s.PerSecond, s.Allowed, s.Shed, s.Failed, s.Dropped, s.P50Ms, s.P99Ms)
				if s.Failed != 0 {
					t.Errorf("%.0f/s: %d checks failed (first error %q): want every check served or shed", s.OfferedRate, s.Failed, s.FirstError)
				}
				twice = twice || s.TwiceEdge
			}
			if rep.Edge == 0 || !twice {
				t.Fatalf("the search found no edge (%v) or ran no step at twice it", rep.Edge)
			}
		})
	}
	assertNoBreaker(t, in)
}
