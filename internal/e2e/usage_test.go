package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestUsageSumsAcrossInstances: three sluice serve processes on one Redis
// and one PostgreSQL, each flushing its usage every second, decide a load
// whose outcome the test counts itself; the usage API of any instance then
// gives the exact sums, and the heaviest subjects their exact denials.
func TestUsageSumsAcrossInstances(t *testing.T) {
	inst, _ := startProduction(t, 3, "--usage-flush", "1s")
	key := setupTenant(inst[0], adminToken, "acme")
	inst[0].must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", adminToken, map[string]any{
		"route":  "/api*",
		"limits": []any{map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 50, "window": "1h"}},
	})
	// Each instance's probes until it sees the rule are checks too (cost
	// 0, allowed): count them.
	probes := 0
	for _, in := range inst {
		testenv.Eventually(t, 5*time.Second, "instance sees the rule", func() bool {
			r := in.do("POST", "/v1/check", key, map[string]any{"route": "/api/x", "subject": "probe", "cost": 0})
			if r.status == http.StatusOK && r.body["rule"] == "api" {
				probes++
				return true
			}
			return false
		})
	}
	const perInstance, cost = 40, 2
	subjects := []string{"alice", "bob", "mallory"}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for _, in := range inst {
		for _, subject := range subjects {
			wg.Go(func() {
				for range perInstance {
					r := in.do("POST", "/v1/check", key, map[string]any{"route": "/api/orders", "subject": subject, "cost": cost})
					mu.Lock()
					statuses[r.status]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// 50 units a subject: 25 checks of cost 2 each allowed, the rest denied.
	allowed, denied := 25*len(subjects), (3*perInstance-25)*len(subjects)
	if statuses[http.StatusOK] != allowed || statuses[http.StatusTooManyRequests] != denied {
		t.Fatalf("statuses %v, want %d allowed and %d denied", statuses, allowed, denied)
	}
	want := fmt.Sprintf("allowed %d denied %d units %d", allowed+probes, denied, allowed*cost)
	var got string
	testenv.Eventually(t, 20*time.Second, "the fleet's sums in the usage API", func() bool {
		r := inst[1].must(http.StatusOK, "GET", "/v1/tenants/acme/usage?rule=api&step=day", adminToken, nil)
		var a, d, u float64
		for _, row := range r.body["rows"].([]any) {
			row := row.(map[string]any)
			a, d, u = a+row["allowed"].(float64), d+row["denied"].(float64), u+row["units"].(float64)
		}
		got = fmt.Sprintf("allowed %.0f denied %.0f units %.0f", a, d, u)
		return got == want
	})
	r := inst[2].must(http.StatusOK, "GET", "/v1/tenants/acme/usage/top?rule=api&by=denied", adminToken, nil)
	top := r.body["subjects"].([]any)
	if len(top) != len(subjects) {
		t.Fatalf("top subjects %v, want the %d subjects", top, len(subjects))
	}
	for _, s := range top {
		s := s.(map[string]any)
		if s["denied"].(float64) != float64(3*perInstance-25) || s["units"].(float64) != 25*cost {
			t.Errorf("top subject %v: want %d denied and %d units", s, 3*perInstance-25, 25*cost)
		}
	}
}

// TestUsageFlushedOnShutdown: what an instance counted since its last flush
// is written when it stops on SIGTERM, before its catalog closes.
func TestUsageFlushedOnShutdown(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	in := startServe(t, dir, addr, nil, "--addr", addr, "--admin-token", adminToken, "--usage-flush", "1h")
	key := setupTenant(in, adminToken, "acme")
	in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", adminToken, map[string]any{
		"route":  "/api*",
		"limits": []any{map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 3, "window": "1h"}},
	})
	for range 5 {
		in.do("POST", "/v1/check", key, map[string]any{"route": "/api/x", "subject": "u"})
	}
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-in.exited
	out, err := exec.Command(binary, "usage", "acme", "--step", "day", "--csv", "--database", "sqlite://"+filepath.Join(dir, "sluice.db")).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice usage: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), ",api,3,2,0,0,0,3\n") {
		t.Errorf("usage after the shutdown:\n%s\nwant 3 allowed and 2 denied of api\nserve's log:\n%s", out, in.stderr)
	}
}
