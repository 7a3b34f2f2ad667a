package httpapi

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// TestLeaseOnTheWire: a limit's "lease": "auto" is stored and read back,
// and a lease on a concurrency limit or of another value is refused.
func TestLeaseOnTheWire(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.putRule("acme", "hot", map[string]any{"route": "/hot", "limits": []any{
		map[string]any{"name": "second", "algorithm": "fixed_window", "limit": 100, "window": "1s", "lease": "auto"},
		map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": 10, "refill_per_second": 5, "lease": "auto"},
	}})
	r := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/hot", testAdminToken, nil)
	if !strings.Contains(r.raw, `"window":"1s","lease":"auto"`) || !strings.Contains(r.raw, `"refill_per_second":5,"lease":"auto"`) {
		t.Fatalf("rule: %s", r.raw)
	}
	for _, l := range []map[string]any{
		{"name": "c", "algorithm": "concurrency", "limit": 2, "ttl": "30s", "lease": "auto"},
		{"name": "w", "algorithm": "fixed_window", "limit": 2, "window": "1m", "lease": "always"},
	} {
		r := h.do("PUT", "/v1/tenants/acme/rules/bad", testAdminToken, map[string]any{"route": "/bad", "limits": []any{l}})
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "lease") {
			t.Errorf("%v: status %d %s", l, r.status, r.raw)
		}
	}
}

// leasedRule is a rule of one fixed window of limit per hour that leases.
func leasedRule(route string, limit int64) map[string]any {
	return map[string]any{"route": route, "limits": []any{
		map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": limit, "window": "1h", "lease": "auto"}}}
}

// lease is the "lease" object of a lease call's answer, nil when null.
func (r response) lease() map[string]any {
	l, _ := r.body["lease"].(map[string]any)
	return l
}

// peekRemaining is what a peek of route for subject says is left.
func (h *harness) peekRemaining(key, route, subject string) float64 {
	h.t.Helper()
	r := h.must(http.StatusOK, "POST", "/v1/check", key, map[string]any{"route": route, "subject": subject, "cost": 0})
	return r.body["remaining"].(float64)
}

// TestRemoteLeaseTakeRenewReturn: a remote holder takes units (consumed at
// once), renews with what it did not use (given back, then granted again)
// and returns the rest; the store's count is exactly what it admitted.
func TestRemoteLeaseTakeRenewReturn(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "hot", leasedRule("/hot*", 100))
	body := map[string]any{"route": "/hot/1", "subject": "s", "holder": "app-1", "want": 30, "ttl_ms": 5000}

	r := h.must(http.StatusOK, "POST", "/v1/leases", key, body)
	l := r.lease()
	if l == nil || l["granted"] != 30.0 || l["expires_in_ms"] != 5000.0 || l["usable_for_ms"].(float64) <= 0 || l["usable_for_ms"].(float64) > 3750 ||
		r.body["allowed"] != true || r.body["remaining"] != 70.0 || r.body["rule"] != "hot" {
		t.Fatalf("take: %s", r.raw)
	}
	if r.header.Get("X-RateLimit-Remaining") != "70" {
		t.Errorf("take headers: %v", r.header)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 70 {
		t.Fatalf("after a grant of 30: %v left, want 70 (granted units are consumed at once)", got)
	}
	id := l["id"].(string)

	// 20 used, 10 back; the new grant is the holder's new want.
	r = h.must(http.StatusOK, "POST", "/v1/leases/"+id+"/renew", key, map[string]any{"unused": 10, "holder": "app-1", "want": 50, "ttl_ms": 5000})
	l2 := r.lease()
	if l2 == nil || l2["granted"] != 50.0 || r.body["returned"] != "returned" || r.body["remaining"] != 30.0 || l2["id"] == id {
		t.Fatalf("renew: %s", r.raw)
	}
	id2 := l2["id"].(string)
	// The old lease is finished: a second renew of it grants nothing new.
	r = h.must(http.StatusOK, "DELETE", "/v1/leases/"+id+"?unused=0", key, nil)
	if r.body["status"] != "finished" {
		t.Fatalf("return of a renewed lease: %s", r.raw)
	}

	// Too many back is refused and changes nothing.
	r = h.do("DELETE", "/v1/leases/"+id2+"?unused=51", key, nil)
	if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "more than the 50") {
		t.Fatalf("return of 51 of 50: %d %s", r.status, r.raw)
	}
	// Another tenant's key does not know the lease.
	h.createTenant("other")
	otherKey, _ := h.createKey("other", "check")
	r = h.must(http.StatusOK, "DELETE", "/v1/leases/"+id2+"?unused=50", otherKey, nil)
	if r.body["status"] != "unknown" {
		t.Fatalf("another tenant's return: %s", r.raw)
	}
	r = h.do("POST", "/v1/leases/"+id2+"/renew", otherKey, map[string]any{"unused": 50, "holder": "x", "want": 1})
	if r.status != http.StatusNotFound || r.errorCode() != "lease_not_found" {
		t.Fatalf("another tenant's renew: %d %s", r.status, r.raw)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 30 {
		t.Fatalf("after refused returns: %v left, want 30", got)
	}

	// 5 of the 50 used.
	r = h.must(http.StatusOK, "DELETE", "/v1/leases/"+id2+"?unused=45", key, nil)
	if r.body["status"] != "returned" || r.body["id"] != id2 {
		t.Fatalf("return: %s", r.raw)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 75 {
		t.Fatalf("after returns: %v left, want 100-20-5 = 75", got)
	}
	// Of the 20 and the 5 admitted, the take's and the renew's own
	// requests needed a call; the other 23 none.
	if got := h.counter("sluice_quota_lease_store_calls_saved_total", map[string]string{"holder": "remote"}); got != 23 {
		t.Errorf("remote store calls saved = %v, want 23", got)
	}
	if got := h.counter("sluice_quota_lease_store_calls_saved_total", map[string]string{"holder": "instance"}); got != 0 {
		t.Errorf("instance store calls saved = %v, want 0 (no hot key here)", got)
	}
	r = h.must(http.StatusOK, "DELETE", "/v1/leases/"+id2+"?unused=45", key, nil)
	if r.body["status"] != "finished" {
		t.Fatalf("second return: %s", r.raw)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 75 {
		t.Fatalf("after a second return: %v left, want 75 still", got)
	}
}

// TestRemoteLeaseDenyAndShare: holders share what is left by demand, and
// once nothing is left a lease call is the store's deny: 429 with
// Retry-After, nothing granted.
func TestRemoteLeaseDenyAndShare(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "hot", leasedRule("/hot", 10))
	take := func(holder string, want int) response {
		return h.do("POST", "/v1/leases", key, map[string]any{"route": "/hot", "holder": holder, "want": want})
	}
	// A wants 6 of 10: granted. B then wants 8 with 4 left and A's 6
	// remembered: 4*8/14 = 2.
	if r := take("a", 6); r.status != http.StatusOK || r.lease()["granted"] != 6.0 {
		t.Fatalf("a: %d %s", r.status, r.raw)
	}
	if r := take("b", 8); r.status != http.StatusOK || r.lease()["granted"] != 2.0 {
		t.Fatalf("b: %d %s", r.status, r.raw)
	}
	// A asks more than the limit holds: asked as 10, 2 left, granted in
	// proportion (2*10/18 = 1).
	if r := take("a", 1000); r.status != http.StatusOK || r.lease()["granted"] != 1.0 {
		t.Fatalf("a again: %d %s", r.status, r.raw)
	}
	take("c", 1)
	r := take("d", 1)
	if r.status != http.StatusTooManyRequests || r.body["allowed"] != false || r.body["lease"] != nil || r.header.Get("Retry-After") == "" ||
		r.body["retry_after_ms"].(float64) <= 0 {
		t.Fatalf("nothing left: %d %v %s", r.status, r.header, r.raw)
	}
	if got := h.peekRemaining(key, "/hot", ""); got != 0 {
		t.Fatalf("%v left, want 0", got)
	}
}

// TestRemoteLeaseRefusals: bad input is a 400 with a sentence, a rule that
// does not lease a 409, a key without the check role a 403; none changes
// anything.
func TestRemoteLeaseRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	adminKey, _ := h.createKey("acme", "admin")
	h.putRule("acme", "hot", leasedRule("/hot", 10))
	h.putRule("acme", "direct", map[string]any{"route": "/direct", "limits": []any{
		map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 10, "window": "1h"}}})
	h.putRule("acme", "half", map[string]any{"route": "/half", "limits": []any{
		map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 10, "window": "1h", "lease": "auto"},
		map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": 10, "refill_per_second": 1}}})
	shadow := leasedRule("/shadow", 10)
	shadow["shadow"] = true
	h.putRule("acme", "shadow", shadow)
	h.putRule("acme", "inflight", map[string]any{"route": "/inflight", "limits": []any{
		map[string]any{"name": "c", "algorithm": "concurrency", "limit": 2, "ttl": "30s"}}})

	for _, tc := range []struct {
		name   string
		key    string
		body   map[string]any
		status int
		code   string
		says   string
	}{
		{"no_holder", key, map[string]any{"route": "/hot", "want": 1}, 400, "invalid_request", "holder"},
		{"bad_holder", key, map[string]any{"route": "/hot", "want": 1, "holder": "-x y"}, 400, "invalid_request", "holder"},
		{"want_0", key, map[string]any{"route": "/hot", "want": 0, "holder": "a"}, 400, "invalid_request", "want"},
		{"want_huge", key, map[string]any{"route": "/hot", "want": 1 << 30, "holder": "a"}, 400, "invalid_request", "wants 1 to"},
		{"ttl_too_long", key, map[string]any{"route": "/hot", "want": 1, "holder": "a", "ttl_ms": 3600000}, 400, "invalid_request", "ttl_ms"},
		{"ttl_too_short", key, map[string]any{"route": "/hot", "want": 1, "holder": "a", "ttl_ms": 1}, 400, "invalid_request", "ttl"},
		{"no_route", key, map[string]any{"want": 1, "holder": "a"}, 400, "invalid_request", "route"},
		{"unknown_field", key, map[string]any{"route": "/hot", "want": 1, "holder": "a", "cost": 2}, 400, "unknown_field", "cost"},
		{"no_rule", key, map[string]any{"route": "/nothing", "want": 1, "holder": "a"}, 409, "rule_not_leased", "No rule"},
		{"not_opted_in", key, map[string]any{"route": "/direct", "want": 1, "holder": "a"}, 409, "rule_not_leased", `must say \"lease\": \"auto\"`},
		{"one_limit_not_opted_in", key, map[string]any{"route": "/half", "want": 1, "holder": "a"}, 409, "rule_not_leased", `must say \"lease\": \"auto\"`},
		{"shadow", key, map[string]any{"route": "/shadow", "want": 1, "holder": "a"}, 409, "rule_not_leased", "shadow"},
		{"concurrency", key, map[string]any{"route": "/inflight", "want": 1, "holder": "a"}, 409, "rule_not_leased", "concurrency"},
		{"admin_key", adminKey, map[string]any{"route": "/hot", "want": 1, "holder": "a"}, 403, "wrong_role", "check role"},
		{"operator", testAdminToken, map[string]any{"route": "/hot", "want": 1, "holder": "a"}, 403, "wrong_role", "check role"},
		{"no_key", "", map[string]any{"route": "/hot", "want": 1, "holder": "a"}, 401, "missing_api_key", "API key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			r := h.do("POST", "/v1/leases", tc.key, tc.body)
			if r.status != tc.status || r.errorCode() != tc.code || !strings.Contains(r.raw, tc.says) {
				t.Fatalf("%d %s, want %d %s saying %q", r.status, r.raw, tc.status, tc.code, tc.says)
			}
		})
	}
	for _, route := range []string{"/hot", "/direct", "/half", "/shadow"} {
		if got := h.peekRemaining(key, route, ""); got != 10 {
			t.Errorf("%s: %v left after refused leases, want 10", route, got)
		}
	}

	r := h.must(http.StatusOK, "POST", "/v1/leases", key, map[string]any{"route": "/hot", "want": 2, "holder": "a"})
	id := r.lease()["id"].(string)
	for _, tc := range []struct {
		name, method, path string
		body               any
		says               string
	}{
		{"renew_without_unused", "POST", "/v1/leases/" + id + "/renew", map[string]any{"holder": "a", "want": 1}, "unused"},
		{"renew_negative_unused", "POST", "/v1/leases/" + id + "/renew", map[string]any{"unused": -1, "holder": "a", "want": 1}, "unused"},
		{"renew_without_holder", "POST", "/v1/leases/" + id + "/renew", map[string]any{"unused": 0, "want": 1}, "holder"},
		{"return_without_unused", "DELETE", "/v1/leases/" + id, nil, "unused"},
		{"return_unused_not_a_number", "DELETE", "/v1/leases/" + id + "?unused=all", nil, "unused"},
		{"return_negative", "DELETE", "/v1/leases/" + id + "?unused=-1", nil, "unused"},
		{"return_malformed_id", "DELETE", "/v1/leases/nope?unused=0", nil, "Lease id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			r := h.do(tc.method, tc.path, key, tc.body)
			if r.status != http.StatusBadRequest || !strings.Contains(r.raw, tc.says) {
				t.Fatalf("%d %s, want 400 saying %q", r.status, r.raw, tc.says)
			}
		})
	}
	if got := h.peekRemaining(key, "/hot", ""); got != 8 {
		t.Errorf("%v left after refused renews and returns, want 8 (the lease's 2 still out)", got)
	}
}

// TestRemoteLeaseStoreOutage: with the store down a lease call is decided
// by the rule's failure mode, as a check of cost 1, and grants nothing.
func TestRemoteLeaseStoreOutage(t *testing.T) {
	redis := testenv.Redis(t)
	rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{Prefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	h := newHarness(t, harnessOptions{store: rs, guard: guard.Options{Timeout: 50 * time.Millisecond}})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	for _, mode := range []string{"closed", "open", "local"} {
		rule := leasedRule("/"+mode, 5)
		rule["failure_mode"] = mode
		h.putRule("acme", mode, rule)
	}
	take := func(route string) response {
		return h.do("POST", "/v1/leases", key, map[string]any{"route": route, "holder": "a", "want": 2})
	}
	testenv.Eventually(t, 5*time.Second, "the first lease is granted", func() bool {
		return take("/closed").status == http.StatusOK
	})

	redis.Stop()
	r := take("/closed")
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "store_unavailable" || r.header.Get("Retry-After") == "" {
		t.Errorf("closed: %d %v %s", r.status, r.header, r.raw)
	}
	r = take("/open")
	if r.status != http.StatusOK || r.body["allowed"] != true || r.body["degraded"] != true || r.body["lease"] != nil {
		t.Errorf("open: %d %s", r.status, r.raw)
	}
	// Local: the in-process fallback decides each call as a check of 1.
	for i := range 6 {
		r = take("/local")
		want := http.StatusOK
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		if r.status != want || r.body["degraded"] != true || r.body["lease"] != nil {
			t.Errorf("local %d: %d %s, want %d", i, r.status, r.raw, want)
		}
	}
}

// TestRemoteLeaseRenewOfRouteIsOneStoreCall: a renew that names its
// lease's route and subject returns the old lease and grants the next in
// one script call on a real Redis (INFO commandstats counts them); one of
// another subject is refused and changes nothing; one of a lease the store
// forgot still grants, saying the old one is unknown.
func TestRemoteLeaseRenewOfRouteIsOneStoreCall(t *testing.T) {
	redis := testenv.Redis(t)
	rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{Prefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	h := newHarness(t, harnessOptions{store: rs})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "hot", leasedRule("/hot*", 100))
	r := h.must(http.StatusOK, "POST", "/v1/leases", key, map[string]any{"route": "/hot/1", "subject": "s", "holder": "app-1", "want": 30})
	id := r.lease()["id"].(string)

	scripts := func() int {
		t.Helper()
		stats, err := redis.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(stats, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
				return n
			}
		}
		return 0
	}
	if _, err := redis.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	r = h.must(http.StatusOK, "POST", "/v1/leases/"+id+"/renew", key,
		map[string]any{"unused": 10, "route": "/hot/1", "subject": "s", "holder": "app-1", "want": 50})
	l := r.lease()
	// 20 used: 80 left, of which the 50 wanted.
	if l == nil || l["granted"] != 50.0 || r.body["returned"] != "returned" || r.body["remaining"] != 30.0 {
		t.Fatalf("renew: %s", r.raw)
	}
	if n := scripts(); n != 1 {
		t.Fatalf("a renew of a named route ran %d script calls, want 1", n)
	}
	// 20 admitted from the first lease, one by the take's own call.
	saved := map[string]string{"holder": "remote"}
	if got := h.counter("sluice_quota_lease_store_calls_saved_total", saved); got != 19 {
		t.Errorf("remote store calls saved = %v, want 19", got)
	}
	id2 := l["id"].(string)

	r = h.do("POST", "/v1/leases/"+id2+"/renew", key, map[string]any{"unused": 50, "route": "/hot/1", "subject": "other", "holder": "app-1", "want": 5})
	if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "not of this tenant, rule and subject") {
		t.Fatalf("a renew naming another subject: %d %s", r.status, r.raw)
	}
	r = h.do("POST", "/v1/leases/"+id2+"/renew", key, map[string]any{"unused": 0, "subject": "s", "holder": "app-1", "want": 5})
	if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "route") {
		t.Fatalf("a renew naming a subject and no route: %d %s", r.status, r.raw)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 30 {
		t.Fatalf("after refused renews: %v left, want 30", got)
	}
	// The old lease is finished: renewing it again grants afresh.
	r = h.must(http.StatusOK, "POST", "/v1/leases/"+id+"/renew", key, map[string]any{"unused": 0, "route": "/hot/1", "subject": "s", "holder": "app-1", "want": 5})
	if r.lease() == nil || r.lease()["granted"] != 5.0 || r.body["returned"] != "finished" {
		t.Fatalf("renew of a finished lease: %s", r.raw)
	}
	if got := h.counter("sluice_quota_lease_store_calls_saved_total", saved); got != 19 {
		t.Errorf("remote store calls saved = %v after a renew of a finished lease, want 19 still", got)
	}
}

// evalshaCalls counts the script calls redis has run since its last
// CONFIG RESETSTAT.
func evalshaCalls(t *testing.T, redis *testenv.RedisServer) int {
	t.Helper()
	stats, err := redis.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// withSuffix is a lease id whose hold id is id's and whose rule and subject
// are rule's and subject's, as the service writes them.
func withSuffix(id, rule, subject string) string {
	hold, _, _ := strings.Cut(id, "~")
	return hold + "~" + base64.RawURLEncoding.EncodeToString(append(append([]byte{byte(len(rule))}, rule...), subject...))
}

// TestRemoteLeaseRenewByIDIsOneStoreCall: a lease's id carries its rule and
// subject, so a renew that names neither returns the old lease and grants
// the next in one script call on a real Redis; an id whose rule or subject
// was changed is unknown (404, no store call, nothing changed), and its
// return says unknown; an id of the store's alone (an older server's)
// still renews, in two calls, and returns.
func TestRemoteLeaseRenewByIDIsOneStoreCall(t *testing.T) {
	redis := testenv.Redis(t)
	rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{Prefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	h := newHarness(t, harnessOptions{store: rs})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.putRule("acme", "hot", leasedRule("/hot*", 100))
	h.putRule("acme", "cold", leasedRule("/cold*", 100))
	r := h.must(http.StatusOK, "POST", "/v1/leases", key, map[string]any{"route": "/hot/1", "subject": "s", "holder": "app-1", "want": 30})
	id := r.lease()["id"].(string)
	if id != withSuffix(id, "hot", "s") || url.PathEscape(id) != id {
		t.Fatalf("lease id %q: want the hold id, '~', and the rule and subject in URL-safe base64", id)
	}
	reset := func() {
		t.Helper()
		if _, err := redis.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}

	reset()
	r = h.must(http.StatusOK, "POST", "/v1/leases/"+id+"/renew", key, map[string]any{"unused": 10, "holder": "app-1", "want": 50})
	l := r.lease()
	// 20 used: 80 left, of which the 50 wanted.
	if l == nil || l["granted"] != 50.0 || r.body["returned"] != "returned" || r.body["remaining"] != 30.0 || r.body["rule"] != "hot" {
		t.Fatalf("renew: %s", r.raw)
	}
	if n := evalshaCalls(t, redis); n != 1 {
		t.Fatalf("a renew by id ran %d script calls, want 1", n)
	}
	if got := h.counter("sluice_quota_lease_store_calls_saved_total", map[string]string{"holder": "remote"}); got != 19 {
		t.Errorf("remote store calls saved = %v, want 19", got)
	}
	id2 := l["id"].(string)

	// Forged: the hold id of a lease of (hot, s) with another subject or
	// rule, or a suffix that is not base64 of one.
	reset()
	for _, forged := range []string{withSuffix(id2, "hot", "other"), withSuffix(id2, "cold", "s"), withSuffix(id2, "nosuchrule", "s")} {
		r = h.do("POST", "/v1/leases/"+forged+"/renew", key, map[string]any{"unused": 50, "holder": "app-1", "want": 5})
		if r.status != http.StatusNotFound || r.errorCode() != "lease_not_found" {
			t.Fatalf("renew of forged id %q: %d %s", forged, r.status, r.raw)
		}
		r = h.must(http.StatusOK, "DELETE", "/v1/leases/"+forged+"?unused=50", key, nil)
		if r.body["status"] != "unknown" || r.body["id"] != forged {
			t.Fatalf("return of forged id %q: %s", forged, r.raw)
		}
	}
	hold, _, _ := strings.Cut(id2, "~")
	for _, garbled := range []string{hold + "~", hold + "~!!", hold + "~AA", "nope~" + strings.SplitN(id2, "~", 2)[1]} {
		r = h.do("POST", "/v1/leases/"+garbled+"/renew", key, map[string]any{"unused": 50, "holder": "app-1", "want": 5})
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "malformed") {
			t.Fatalf("renew of garbled id %q: %d %s", garbled, r.status, r.raw)
		}
	}
	if n := evalshaCalls(t, redis); n != 0 {
		t.Fatalf("forged and garbled ids ran %d script calls, want 0", n)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 30 {
		t.Fatalf("after forged renews and returns: %v left, want 30", got)
	}
	if got := h.peekRemaining(key, "/cold", "s"); got != 100 {
		t.Fatalf("cold after forged renews: %v left, want 100", got)
	}

	// The store's id alone (an older server's): two calls, the return
	// then the grant.
	reset()
	r = h.must(http.StatusOK, "POST", "/v1/leases/"+hold+"/renew", key, map[string]any{"unused": 40, "holder": "app-1", "want": 5})
	if r.lease() == nil || r.lease()["granted"] != 5.0 || r.body["returned"] != "returned" || r.body["remaining"] != 65.0 {
		t.Fatalf("renew of an old-style id: %s", r.raw)
	}
	if n := evalshaCalls(t, redis); n != 2 {
		t.Fatalf("a renew of an old-style id ran %d script calls, want 2", n)
	}
	id3 := r.lease()["id"].(string)
	hold3, _, _ := strings.Cut(id3, "~")
	r = h.must(http.StatusOK, "DELETE", "/v1/leases/"+hold3+"?unused=5", key, nil)
	if r.body["status"] != "returned" {
		t.Fatalf("return of an old-style id: %s", r.raw)
	}
	if got := h.peekRemaining(key, "/hot/2", "s"); got != 70 {
		t.Fatalf("after returns: %v left, want 100-20-10 = 70", got)
	}
}

// TestRemoteLeaseIDOfLongSubject: a subject as long as the API takes fits
// in the id, within MaxRemoteLeaseIDBytes, and renews in one call; a rule
// gone since is 409, the old lease returned all the same.
func TestRemoteLeaseIDOfLongSubject(t *testing.T) {
	redis := testenv.Redis(t)
	rs, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{Prefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	h := newHarness(t, harnessOptions{store: rs})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	name := strings.Repeat("r", sluice.MaxNameBytes)
	h.putRule("acme", name, leasedRule("/hot*", 100))
	subject := strings.Repeat("é", MaxRequestSubjectBytes/2)
	r := h.must(http.StatusOK, "POST", "/v1/leases", key, map[string]any{"route": "/hot/1", "subject": subject, "holder": "a", "want": 10})
	id := r.lease()["id"].(string)
	if len(id) > check.MaxRemoteLeaseIDBytes || id != withSuffix(id, name, subject) {
		t.Fatalf("id of %d bytes, want at most %d: %q", len(id), check.MaxRemoteLeaseIDBytes, id)
	}
	if _, err := redis.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	r = h.must(http.StatusOK, "POST", "/v1/leases/"+id+"/renew", key, map[string]any{"unused": 5, "holder": "a", "want": 10})
	if r.lease() == nil || r.body["returned"] != "returned" || r.body["remaining"] != 85.0 {
		t.Fatalf("renew: %s", r.raw)
	}
	if n := evalshaCalls(t, redis); n != 1 {
		t.Fatalf("a renew by id ran %d script calls, want 1", n)
	}
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/"+name, testAdminToken, nil)
	r = h.do("POST", "/v1/leases/"+r.lease()["id"].(string)+"/renew", key, map[string]any{"unused": 10, "holder": "a", "want": 10})
	if r.status != http.StatusConflict || r.errorCode() != "rule_not_leased" || !strings.Contains(r.raw, "no longer exists") {
		t.Fatalf("renew of a lease of a deleted rule: %d %s", r.status, r.raw)
	}
	h.putRule("acme", name, leasedRule("/hot*", 100))
	if got := h.peekRemaining(key, "/hot/1", subject); got != 95 {
		t.Fatalf("%v left, want 100-5 = 95 (the last lease returned unused)", got)
	}
}
