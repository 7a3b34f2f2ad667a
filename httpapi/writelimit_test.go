package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// resetBurst sends n subject resets of rule acme/api at once with key and
// returns how many answered each status, and one 429 answer.
func resetBurst(h *harness, key string, n int) (map[int]int, response) {
	h.t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	var denied response
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := h.do("DELETE", fmt.Sprintf("/v1/tenants/acme/rules/api/subjects/user-%d", i), key, nil)
				mu.Lock()
				statuses[r.status]++
				if r.status == http.StatusTooManyRequests {
					denied = r
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return statuses, denied
}

// TestAdminWritesAreLimitedPerTenant: 2,000 subject resets sent at once
// with one tenant's admin key are admitted no faster than the limit (a
// burst of 200, then 50 a second) and the rest answer 429 rate_limited,
// with the rate-limit headers and the exact wait; another tenant's writes,
// the operator's, and the tenant's own reads are not held back.
func TestAdminWritesAreLimitedPerTenant(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		h := newHarness(t, harnessOptions{})
		acme, beta := setUpWriters(h)
		start := time.Now()
		statuses, denied := resetBurst(h, acme, 2000)
		elapsed := time.Since(start)
		allowed := statuses[http.StatusNoContent]
		// At most the burst plus what refilled while the resets ran: the
		// bound grows with the time taken, so a slow machine cannot fail it.
		most := 200 + int(math.Ceil(50*elapsed.Seconds()))
		if allowed < 200 || allowed > most || statuses[http.StatusTooManyRequests] != 2000-allowed {
			t.Fatalf("2,000 resets at once answered %v in %v; want 200 to %d allowed, the rest 429", statuses, elapsed, most)
		}
		t.Logf("2,000 resets at once: %d allowed, %d answered 429, in %v", allowed, statuses[http.StatusTooManyRequests], elapsed.Round(time.Millisecond))
		checkDenied(t, denied, 20)
		otherWritersGoOn(h, acme, beta)
	})
	t.Run("no_refill", func(t *testing.T) {
		// A limit that does not refill while the test runs: exactly the
		// burst is admitted, however long the resets take.
		h := newHarness(t, harnessOptions{writeLimit: sluice.TokenBucket(200, 0.0001)})
		acme, beta := setUpWriters(h)
		statuses, denied := resetBurst(h, acme, 2000)
		if statuses[http.StatusNoContent] != 200 || statuses[http.StatusTooManyRequests] != 1800 {
			t.Fatalf("2,000 resets at once answered %v; want 200 allowed and 1,800 429", statuses)
		}
		checkDenied(t, denied, 10_000_000)
		otherWritersGoOn(h, acme, beta)
	})
}

// setUpWriters makes tenants acme (with rule api) and beta, and returns an
// admin key of each.
func setUpWriters(h *harness) (acme, beta string) {
	h.t.Helper()
	h.createTenant("acme")
	h.createTenant("beta")
	h.putRule("acme", "api", map[string]any{"route": "/api/*", "limits": []any{
		map[string]any{"name": "minute", "algorithm": "fixed_window", "limit": 10, "window": "1m"}}})
	acme, _ = h.createKey("acme", "admin")
	beta, _ = h.createKey("beta", "admin")
	return acme, beta
}

// checkDenied checks a 429 of the write limit: its code, its exact wait
// (at most maxMs, the time one write takes to refill) and its headers.
func checkDenied(t *testing.T, r response, maxMs float64) {
	t.Helper()
	if r.errorCode() != "rate_limited" {
		t.Fatalf("a refused write answered %d %s", r.status, r.raw)
	}
	e := r.body["error"].(map[string]any)
	ms, _ := e["retry_after_ms"].(float64)
	if ms < 1 || ms > maxMs {
		t.Errorf("retry_after_ms %v, want 1 to %v", e["retry_after_ms"], maxMs)
	}
	if got, want := r.header.Get("Retry-After"), strconv.Itoa(int(math.Ceil(ms/1000))); got != want {
		t.Errorf("Retry-After %q, want %q (retry_after_ms %v rounded up)", got, want, ms)
	}
	for _, name := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if r.header.Get(name) == "" {
			t.Errorf("a refused write has no %s header", name)
		}
	}
}

// otherWritersGoOn: with acme's writes held back, acme still reads, and
// beta and the operator still write.
func otherWritersGoOn(h *harness, acme, beta string) {
	h.t.Helper()
	h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules", acme, nil)
	h.must(http.StatusCreated, "POST", "/v1/tenants/beta/keys", beta, map[string]any{"role": "check"})
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api/subjects/user-1", testAdminToken, nil)
}
