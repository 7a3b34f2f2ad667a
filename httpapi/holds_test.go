package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func concurrencyRule(route string, limit int64, ttl string) map[string]any {
	return map[string]any{
		"route":  route,
		"limits": []any{map[string]any{"name": "inflight", "algorithm": "concurrency", "limit": limit, "ttl": ttl}},
	}
}

func holdID(t *testing.T, r response) string {
	t.Helper()
	hold, ok := r.body["hold"].(map[string]any)
	if !ok {
		t.Fatalf("decision without a hold: %s", r.raw)
	}
	return hold["id"].(string)
}

func TestConcurrencyLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "uploads", concurrencyRule("/upload*", 2, "30s"))
	labels := map[string]string{"tenant": "acme", "rule": "uploads"}

	t.Run("the_rule_reads_back_with_its_ttl", func(t *testing.T) {
		h := h.with(t)
		r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/uploads", testAdminToken, nil)
		if !strings.Contains(r.raw, `"algorithm":"concurrency","limit":2,"ttl":"30s"`) {
			t.Fatalf("rule: %s", r.raw)
		}
	})

	t.Run("leases_up_to_the_limit_then_429_until_released", func(t *testing.T) {
		h := h.with(t)
		body := map[string]any{"route": "/upload", "subject": "alice"}
		first := h.check(key, body)
		if first.status != http.StatusOK || first.body["hold"].(map[string]any)["expires_in_ms"].(float64) != 30000 {
			t.Fatalf("first: %d %s", first.status, first.raw)
		}
		if p := first.header.Get("RateLimit-Policy"); p != `"uploads.inflight";q=2;qu="concurrent-requests"` {
			t.Fatalf("RateLimit-Policy %q", p)
		}
		if got := h.gauge("sluice_leases_held", labels); got != 1 {
			t.Fatalf("sluice_leases_held = %v, want 1", got)
		}
		h.must(http.StatusOK, "POST", "/v1/check", key, body)
		denied := h.check(key, body)
		if denied.status != http.StatusTooManyRequests || denied.body["hold"] != nil || denied.header.Get("Retry-After") != "30" {
			t.Fatalf("third: %d %v %s", denied.status, denied.header, denied.raw)
		}
		r := h.must(http.StatusOK, "DELETE", "/v1/holds/"+holdID(t, first), key, nil)
		if r.body["status"] != "released" {
			t.Fatalf("release: %s", r.raw)
		}
		r = h.must(http.StatusOK, "DELETE", "/v1/holds/"+holdID(t, first), key, nil)
		if r.body["status"] != "finished" {
			t.Fatalf("second release: %s", r.raw)
		}
		// Not cached: the deny's retry_after was only an upper bound.
		h.must(http.StatusOK, "POST", "/v1/check", key, body)
		if got := h.counter("sluice_lease_ends_total", map[string]string{"tenant": "acme", "rule": "uploads", "how": "released"}); got != 1 {
			t.Fatalf("sluice_lease_ends_total{how=released} = %v, want 1", got)
		}
		if got := h.gauge("sluice_leases_held", labels); got != 2 {
			t.Fatalf("sluice_leases_held = %v, want 2", got)
		}
	})

	t.Run("extend_renews_the_hold", func(t *testing.T) {
		h := h.with(t)
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/upload", "subject": "bob"}))
		r := h.must(http.StatusOK, "POST", "/v1/holds/"+id+"/extend", key, nil)
		if r.body["status"] != "extended" || r.body["expires_in_ms"].(float64) != 30000 {
			t.Fatalf("extend: %s", r.raw)
		}
	})

	t.Run("another_tenants_key_cannot_touch_a_hold", func(t *testing.T) {
		h := h.with(t)
		h.createTenant("other")
		otherKey, _ := h.createKey("other", "check")
		body := map[string]any{"route": "/upload", "subject": "carol"}
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, body))
		h.must(http.StatusOK, "POST", "/v1/check", key, body)
		if r := h.must(http.StatusOK, "DELETE", "/v1/holds/"+id, otherKey, nil); r.body["status"] != "unknown" {
			t.Fatalf("other tenant's release: %s", r.raw)
		}
		if r := h.do("POST", "/v1/holds/"+id+"/settle", otherKey, map[string]any{"cost": 1}); r.status != http.StatusNotFound || r.errorCode() != "hold_not_found" {
			t.Fatalf("other tenant's settle: %d %s", r.status, r.raw)
		}
		// Still held by acme.
		h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, body)
	})

	t.Run("only_a_check_key_may_touch_a_hold", func(t *testing.T) {
		h := h.with(t)
		adminKey, _ := h.createKey("acme", "admin")
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/upload", "subject": "dave"}))
		if r := h.do("DELETE", "/v1/holds/"+id, adminKey, nil); r.status != http.StatusForbidden || r.errorCode() != "wrong_role" {
			t.Fatalf("admin-role key: %d %s", r.status, r.raw)
		}
		if r := h.do("DELETE", "/v1/holds/"+id, "", nil); r.status != http.StatusUnauthorized {
			t.Fatalf("no key: %d %s", r.status, r.raw)
		}
	})

	t.Run("bad_concurrency_limits_are_refused_in_words", func(t *testing.T) {
		h := h.with(t)
		for _, l := range []map[string]any{
			{"name": "c", "algorithm": "concurrency", "limit": 2},
			{"name": "c", "algorithm": "concurrency", "limit": 2, "ttl": "30s", "window": "1m"},
			{"name": "c", "algorithm": "concurrency", "limit": 0, "ttl": "30s"},
			{"name": "c", "algorithm": "concurrency", "limit": 2, "ttl": "0s"},
			{"name": "c", "algorithm": "fixed_window", "limit": 2, "window": "1m", "ttl": "30s"},
		} {
			r := h.do("PUT", "/v1/tenants/acme/rules/bad", testAdminToken, map[string]any{"route": "/bad", "limits": []any{l}})
			if r.status != http.StatusBadRequest {
				t.Errorf("%v: status %d %s", l, r.status, r.raw)
			}
		}
	})
}

func TestReserveThenSettle(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("llm")
	key, _ := h.createKey("llm", "check")
	h.putRule("llm", "tokens", tokenBucketRule("/v1/complete", 1000, slowRefill))
	body := func(subject string, cost int) map[string]any {
		return map[string]any{"route": "/v1/complete", "subject": subject, "cost": cost, "reserve": true}
	}
	peek := func(h *harness, subject string) float64 {
		r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/v1/complete", "subject": subject, "cost": 0})
		return r.body["remaining"].(float64)
	}

	t.Run("settle_refunds_the_unused_estimate", func(t *testing.T) {
		h := h.with(t)
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, body("a", 800)))
		if got := peek(h, "a"); got != 200 {
			t.Fatalf("after reserving 800: %v remaining", got)
		}
		if r := h.must(http.StatusOK, "POST", "/v1/holds/"+id+"/settle", key, map[string]any{"cost": 300}); r.body["status"] != "settled" {
			t.Fatalf("settle: %s", r.raw)
		}
		if got := peek(h, "a"); got != 700 {
			t.Fatalf("after settling at 300: %v remaining, want 700", got)
		}
		r := h.do("POST", "/v1/holds/"+id+"/settle", key, map[string]any{"cost": 0})
		if r.status != http.StatusConflict || r.errorCode() != "hold_finished" {
			t.Fatalf("second settle: %d %s", r.status, r.raw)
		}
		if got := peek(h, "a"); got != 700 {
			t.Fatalf("a refused settle changed the bucket: %v remaining", got)
		}
	})

	t.Run("a_refund_clears_the_deny_cache", func(t *testing.T) {
		h := h.with(t)
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, body("b", 1000)))
		h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, map[string]any{"route": "/v1/complete", "subject": "b", "cost": 10})
		h.must(http.StatusOK, "POST", "/v1/holds/"+id+"/settle", key, map[string]any{"cost": 100})
		h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/v1/complete", "subject": "b", "cost": 10})
	})

	t.Run("a_settle_is_judged_against_the_rule_as_it_is_now", func(t *testing.T) {
		// Issue 26: a settle above the estimate after a capacity cut is
		// charged from the lowered level, and raising the capacity back
		// hands nothing out.
		h := h.with(t)
		cut := func(capacity int64) { h.putRule("llm", "cut", tokenBucketRule("/v1/cut", capacity, slowRefill)) }
		remaining := func() float64 {
			r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/v1/cut", "subject": "d", "cost": 0})
			return r.body["remaining"].(float64)
		}
		cut(10)
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/v1/cut", "subject": "d", "cost": 2, "reserve": true}))
		cut(3)
		if got := remaining(); got != 3 {
			t.Fatalf("after the cut: %v remaining, want 3", got)
		}
		h.must(http.StatusOK, "POST", "/v1/holds/"+id+"/settle", key, map[string]any{"cost": 5})
		if got := remaining(); got != 0 {
			t.Fatalf("after settling 5 on 3 left: %v remaining, want 0", got)
		}
		cut(10)
		if got := remaining(); got != 0 {
			t.Fatalf("raised back: %v remaining, want 0", got)
		}
	})

	t.Run("bad_settles_are_input_errors_that_change_nothing", func(t *testing.T) {
		h := h.with(t)
		id := holdID(t, h.must(http.StatusOK, "POST", "/v1/check", key, body("c", 500)))
		for _, c := range []struct {
			path string
			body any
		}{
			{"/v1/holds/" + id + "/settle", map[string]any{}},
			{"/v1/holds/" + id + "/settle", map[string]any{"cost": -1}},
			{"/v1/holds/" + id + "/settle", map[string]any{"cost": 1001}},
			{"/v1/holds/not-a-hold/settle", map[string]any{"cost": 1}},
		} {
			if r := h.do("POST", c.path, key, c.body); r.status != http.StatusBadRequest {
				t.Errorf("%s %v: %d %s", c.path, c.body, r.status, r.raw)
			}
		}
		if got := peek(h, "c"); got != 500 {
			t.Fatalf("bad settles changed the bucket: %v remaining", got)
		}
		unknown := id[:23] + strings.Repeat("A", 22)
		if r := h.do("POST", "/v1/holds/"+unknown+"/settle", key, map[string]any{"cost": 1}); r.status != http.StatusNotFound {
			t.Fatalf("unknown hold: %d %s", r.status, r.raw)
		}
	})

	t.Run("a_check_without_reserve_takes_no_hold", func(t *testing.T) {
		h := h.with(t)
		r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": "/v1/complete", "subject": "d", "cost": 5})
		if _, ok := r.body["hold"]; ok {
			t.Fatalf("hold without reserve: %s", r.raw)
		}
	})
}

// TestStrictConcurrencyOverHTTP: 300 workers over 4 service instances sharing
// one Redis, each holding a lease a random few milliseconds; the holders
// themselves count how many hold at once.
func TestStrictConcurrencyOverHTTP(t *testing.T) {
	redis := testenv.Redis(t)
	dsn := testenv.Postgres(t)
	var hs []*harness
	for range 4 {
		rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		// A generous store deadline: 300 workers on two cores delay the
		// reading of answers, and the deadline is not what is tested.
		hs = append(hs, newHarness(t, harnessOptions{dsn: dsn, store: rs, guard: guard.Options{Timeout: 10 * time.Second}}))
	}
	const limit = 4
	hs[0].createTenant("acme")
	key, _ := hs[0].createKey("acme", "check")
	hs[0].putRule("acme", "uploads", concurrencyRule("/upload*", limit, "1m"))
	for _, h := range hs {
		testenv.Eventually(t, 10*time.Second, "rule reaches every instance", func() bool {
			return h.do("POST", "/v1/check", key, map[string]any{"route": "/upload", "subject": "probe", "cost": 0}).body["rule"] == "uploads"
		})
	}

	// The work a lease covers is long next to a round trip, since a holder
	// stops counting itself before its release lands: with 300 workers'
	// denied checks queued in front of it, a release can take tens of
	// milliseconds, and the holders must overlap for the peak to show.
	storetest.Holders(t, 300, limit, 150*time.Millisecond, func(w int) (func() error, bool, error) {
		h := hs[w%len(hs)].with(t)
		r := h.do("POST", "/v1/check", key, map[string]any{"route": "/upload", "subject": "hot"})
		switch r.status {
		case http.StatusTooManyRequests:
			return nil, false, nil
		case http.StatusOK:
		default:
			return nil, false, fmt.Errorf("check: %d %s", r.status, r.raw)
		}
		return func() error {
			if r := h.do("DELETE", "/v1/holds/"+holdID(t, r), key, nil); r.body["status"] != "released" {
				return fmt.Errorf("release: %d %s", r.status, r.raw)
			}
			return nil
		}, true, nil
	})
}

// TestCrashedHoldersFreeAtTTLOverHTTP: holders that never release lose their
// leases at the TTL, and the service counts them as expired.
func TestCrashedHoldersFreeAtTTLOverHTTP(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "jobs", concurrencyRule("/jobs", 2, "300ms"))
	body := map[string]any{"route": "/jobs", "subject": "s"}
	start := time.Now()
	h.must(http.StatusOK, "POST", "/v1/check", key, body)
	h.must(http.StatusOK, "POST", "/v1/check", key, body)
	h.must(http.StatusTooManyRequests, "POST", "/v1/check", key, body)
	testenv.Eventually(t, 10*time.Second, "the crashed holders' leases expire", func() bool {
		return h.do("POST", "/v1/check", key, body).status == http.StatusOK
	})
	if since := time.Since(start); since < 300*time.Millisecond {
		t.Fatalf("freed after %v, before the 300ms ttl", since)
	}
	if got := h.counter("sluice_lease_ends_total", map[string]string{"tenant": "acme", "rule": "jobs", "how": "expired"}); got < 1 {
		t.Fatalf("sluice_lease_ends_total{how=expired} = %v, want at least 1", got)
	}
}
