package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
)

// plansRule is a rule of 2 requests a minute, with a free plan of 1 and a
// pro plan of 5, all under the limit name "minute".
func plansRule(route string) map[string]any {
	window := func(n int) []any {
		return []any{map[string]any{"name": "minute", "algorithm": "fixed_window", "limit": n, "window": "1m"}}
	}
	return map[string]any{"route": route, "limits": window(2), "plans": map[string]any{"free": window(1), "pro": window(5)}}
}

func minuteLimit(n int) []any {
	return []any{map[string]any{"name": "minute", "algorithm": "fixed_window", "limit": n, "window": "1m"}}
}

// admitted counts how many of n checks of cost 1 are allowed.
func (h *harness) admitted(key string, n int, body map[string]any) int {
	h.t.Helper()
	ok := 0
	for range n {
		r := h.check(key, body)
		switch r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			h.t.Fatalf("check %v: %d %s", body, r.status, r.raw)
		}
	}
	return ok
}

func TestPlansAreChosenAtCheckTime(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))

	got := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api", testAdminToken, nil)
	plans, _ := got.body["plans"].(map[string]any)
	if len(plans) != 2 || plans["free"] == nil || plans["pro"] == nil {
		t.Fatalf("GET rule: plans %v, want free and pro", got.body["plans"])
	}

	for _, c := range []struct {
		plan string
		want int
	}{{"", 2}, {"free", 1}, {"pro", 5}} {
		body := map[string]any{"route": "/api/x", "subject": "s-" + c.plan}
		if c.plan != "" {
			body["plan"] = c.plan
		}
		if n := h.admitted(key, 8, body); n != c.want {
			t.Errorf("plan %q: %d of 8 admitted, want %d", c.plan, n, c.want)
		}
	}

	r := h.check(key, map[string]any{"route": "/api/x", "subject": "u", "plan": "pro"})
	if r.body["plan"] != "pro" || r.header.Get("X-RateLimit-Plan") != "pro" {
		t.Errorf("decision of a pro check: plan %v, header %q; want pro in both", r.body["plan"], r.header.Get("X-RateLimit-Plan"))
	}
	if p := r.header.Get("RateLimit-Policy"); !strings.Contains(p, "q=5") {
		t.Errorf("RateLimit-Policy %q does not show the pro plan's limit of 5", p)
	}
	if _, ok := h.check(key, map[string]any{"route": "/api/x", "subject": "u"}).body["plan"]; ok {
		t.Errorf("a check naming no plan answers a plan")
	}

	ctx := context.Background()
	before, _ := h.catalog.Version(ctx)
	r = h.check(key, map[string]any{"route": "/api/x", "subject": "u", "plan": "gold"})
	if r.status != http.StatusBadRequest || !strings.Contains(r.raw, "free, pro") {
		t.Errorf("unknown plan: %d %s; want 400 naming free, pro", r.status, r.raw)
	}
	if after, _ := h.catalog.Version(ctx); after != before {
		t.Errorf("an unknown plan changed the catalog")
	}
}

func TestOverridesThroughTheAdminAPI(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	key, _ := h.createKey("acme", "check")
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))
	base := "/v1/tenants/acme/rules/api/overrides/"

	week := time.Now().Add(7 * 24 * time.Hour).UTC().Truncate(time.Second)
	r := h.must(http.StatusCreated, "PUT", base+"big-customer", testAdminToken,
		map[string]any{"subjects": "bigco", "limits": minuteLimit(4), "expires_at": week.Format(time.RFC3339)})
	if subs, _ := r.body["subjects"].([]any); len(subs) != 1 || subs[0] != "bigco" {
		t.Errorf("a single subject string is stored as %v, want [bigco]", r.body["subjects"])
	}
	if r.body["expires_at"] != week.Format(time.RFC3339) {
		t.Errorf("expires_at %v, want %s", r.body["expires_at"], week.Format(time.RFC3339))
	}
	h.must(http.StatusOK, "PUT", base+"big-customer", testAdminToken,
		map[string]any{"subjects": []string{"bigco"}, "limits": minuteLimit(3), "expires_at": week.Format(time.RFC3339)})
	h.must(http.StatusCreated, "PUT", base+"vips", testAdminToken, map[string]any{"subjects": []string{"vip-*"}, "limits": minuteLimit(6)})
	h.must(http.StatusCreated, "PUT", base+"gold-vips", testAdminToken, map[string]any{"subjects": []string{"vip-gold-*"}, "limits": minuteLimit(7)})

	list := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/overrides", testAdminToken, nil)
	var names []string
	for _, o := range list.body["overrides"].([]any) {
		names = append(names, o.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "big-customer,gold-vips,vips" {
		t.Errorf("list: %v", names)
	}
	if got := h.must(http.StatusOK, "GET", base+"vips", testAdminToken, nil); got.body["expires_at"] != nil {
		t.Errorf("an override without expiry reads expires_at %v, want null", got.body["expires_at"])
	}

	// The subject inspector peeks under the limits the subject's checks get.
	peek := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/subjects/vip-gold-9?plan=free", testAdminToken, nil)
	if peek.body["override"] != "gold-vips" || peek.body["plan"] != "free" || peek.body["limit"] != float64(7) {
		t.Errorf("peek of vip-gold-9: %s; want the gold-vips override's limit of 7", peek.raw)
	}
	if r := h.do("GET", "/v1/tenants/acme/rules/api/subjects/x?plan=gold", testAdminToken, nil); r.status != http.StatusBadRequest {
		t.Errorf("peek under an unknown plan: %d %s", r.status, r.raw)
	}

	for _, c := range []struct {
		subject, plan, override string
		want                    int
	}{
		{"bigco", "", "big-customer", 3},
		{"bigco", "free", "big-customer", 3}, // an override applies on top of a plan
		{"vip-1", "", "vips", 6},
		{"vip-gold-1", "", "gold-vips", 7}, // the longest prefix wins
		{"other", "free", "", 1},
	} {
		body := map[string]any{"route": "/api/x", "subject": c.subject}
		if c.plan != "" {
			body["plan"] = c.plan
		}
		first := h.check(key, body)
		if first.body["override"] != nilIfEmpty(c.override) || first.header.Get("X-RateLimit-Override") != c.override {
			t.Errorf("%s: override %v (header %q), want %q", c.subject, first.body["override"], first.header.Get("X-RateLimit-Override"), c.override)
		}
		// Counters are by limit name: the plan's and the override's
		// "minute" are one counter for a subject (first took one).
		if n := 1 + h.admitted(key, 9, body); n != c.want {
			t.Errorf("%s (plan %q): %d of 10 admitted, want %d", c.subject, c.plan, n, c.want)
		}
		if c.subject == "bigco" {
			h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api/subjects/bigco", testAdminToken, nil)
		}
	}

	h.must(http.StatusNoContent, "DELETE", base+"vips", testAdminToken, nil)
	h.must(http.StatusNotFound, "GET", base+"vips", testAdminToken, nil)
	h.must(http.StatusNotFound, "DELETE", base+"vips", testAdminToken, nil)
	if r := h.check(key, map[string]any{"route": "/api/x", "subject": "vip-2"}); r.body["override"] != nil {
		t.Errorf("a deleted override still applies: %s", r.raw)
	}

	audit := h.must(http.StatusOK, "GET", "/v1/audit?tenant=acme", testAdminToken, nil)
	var actions []string
	for _, e := range audit.body["entries"].([]any) {
		e := e.(map[string]any)
		if strings.HasPrefix(e["action"].(string), "override.") {
			actions = append(actions, e["action"].(string)+" "+e["target"].(string))
		}
	}
	want := "override.delete api/vips,override.create api/gold-vips,override.create api/vips,override.replace api/big-customer,override.create api/big-customer"
	if strings.Join(actions, ",") != want {
		t.Errorf("audit log:\n got  %s\n want %s", strings.Join(actions, ","), want)
	}

	// Deleting the rule deletes its overrides.
	h.must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/api", testAdminToken, nil)
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))
	if list := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/overrides", testAdminToken, nil); len(list.body["overrides"].([]any)) != 0 {
		t.Errorf("a rule created again inherits overrides: %s", list.raw)
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestOverrideBadInputChangesNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.createTenant("acme")
	h.createTenant("globex")
	acmeAdmin, _ := h.createKey("acme", "admin")
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))
	h.must(http.StatusCreated, "PUT", "/v1/tenants/globex/rules/api", testAdminToken, plansRule("/api*"))
	base := "/v1/tenants/acme/rules/api/overrides/"
	h.must(http.StatusCreated, "PUT", base+"taken", testAdminToken, map[string]any{"subjects": []string{"alice", "vip-*"}, "limits": minuteLimit(9)})
	ok := map[string]any{"subjects": "bob", "limits": minuteLimit(3)}
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)

	ctx := context.Background()
	for _, c := range []struct {
		name, method, path string
		key                string
		body               any
		status             int
		code, says         string
	}{
		{"unknown_limit", "PUT", base + "o", testAdminToken, map[string]any{"subjects": "bob",
			"limits": []any{map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 3, "window": "1h"}}}, 400, "invalid_request", `no limit named "hour"`},
		{"expired", "PUT", base + "o", testAdminToken, map[string]any{"subjects": "bob", "limits": minuteLimit(3), "expires_at": past}, 400, "invalid_request", "in the past"},
		{"malformed_expiry", "PUT", base + "o", testAdminToken, map[string]any{"subjects": "bob", "limits": minuteLimit(3), "expires_at": "next tuesday"}, 400, "invalid_request", "RFC 3339"},
		{"no_subjects", "PUT", base + "o", testAdminToken, map[string]any{"limits": minuteLimit(3)}, 400, "invalid_request", "subjects"},
		{"inner_star", "PUT", base + "o", testAdminToken, map[string]any{"subjects": "a*b", "limits": minuteLimit(3)}, 400, "invalid_request", "only at its end"},
		{"no_limits", "PUT", base + "o", testAdminToken, map[string]any{"subjects": "bob", "limits": []any{}}, 400, "invalid_request", "limits"},
		{"subjects_not_strings", "PUT", base + "o", testAdminToken, map[string]any{"subjects": 7, "limits": minuteLimit(3)}, 400, "invalid_request", "subjects"},
		{"bad_override_name", "PUT", base + "Not_A_Slug", testAdminToken, ok, 400, "invalid_request", "Override name"},
		{"same_exact_value", "PUT", base + "o", testAdminToken, map[string]any{"subjects": []string{"carol", "alice"}, "limits": minuteLimit(3)}, 409, "conflict", `already claimed by override "taken"`},
		{"same_prefix", "PUT", base + "o", testAdminToken, map[string]any{"subjects": "vip-*", "limits": minuteLimit(3)}, 409, "conflict", `already claimed by override "taken"`},
		{"no_rule", "PUT", "/v1/tenants/acme/rules/nope/overrides/o", testAdminToken, ok, 404, "not_found", "nope"},
		{"list_no_rule", "GET", "/v1/tenants/acme/rules/nope/overrides", testAdminToken, nil, 404, "not_found", "nope"},
		{"other_tenant", "PUT", "/v1/tenants/globex/rules/api/overrides/o", acmeAdmin, ok, 403, "forbidden", "another tenant"},
		{"other_tenant_reads", "GET", "/v1/tenants/globex/rules/api/overrides", acmeAdmin, nil, 403, "forbidden", "another tenant"},
		{"rule_drops_a_limit_an_override_sets", "PUT", "/v1/tenants/acme/rules/api", testAdminToken, map[string]any{"route": "/api*",
			"limits": []any{map[string]any{"name": "hour", "algorithm": "fixed_window", "limit": 3, "window": "1h"}}}, 409, "conflict", `override "taken"`},
		{"plan_without_limits", "PUT", "/v1/tenants/acme/rules/api", testAdminToken, map[string]any{"route": "/api*", "limits": minuteLimit(1),
			"plans": map[string]any{"free": []any{}}}, 400, "invalid_request", `Plan "free"`},
		{"bad_plan_name", "PUT", "/v1/tenants/acme/rules/api", testAdminToken, map[string]any{"route": "/api*", "limits": minuteLimit(1),
			"plans": map[string]any{"Free Tier": minuteLimit(1)}}, 400, "invalid_request", "plan name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := h.with(t)
			before, _ := h.catalog.Version(ctx)
			r := h.do(c.method, c.path, c.key, c.body)
			msg, _ := r.body["error"].(map[string]any)["message"].(string)
			if r.status != c.status || r.errorCode() != c.code || !strings.Contains(msg, c.says) {
				t.Errorf("got %d %s; want %d %s saying %q", r.status, r.raw, c.status, c.code, c.says)
			}
			if after, _ := h.catalog.Version(ctx); after != before {
				t.Errorf("catalog changed: version %d -> %d", before, after)
			}
		})
	}
	if list := h.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/overrides", testAdminToken, nil); len(list.body["overrides"].([]any)) != 1 {
		t.Errorf("overrides after bad input: %s", list.raw)
	}

	// A tenant admin key manages its own tenant's overrides.
	h.must(http.StatusCreated, "PUT", base+"own", acmeAdmin, ok)
	h.must(http.StatusNoContent, "DELETE", base+"own", acmeAdmin, nil)
}

func TestOverrideCapPerTenant(t *testing.T) {
	ctx := context.Background()
	pc := newPostgresCatalog(t, testenv.Postgres(t))
	if err := pc.SetAdminTokenHash(ctx, sluice.HashAPIKey(testAdminToken)); err != nil {
		t.Fatal(err)
	}
	pc.SetTenantCaps(sluice.TenantCaps{Overrides: 2})
	h := newHarness(t, harnessOptions{catalog: pc})
	h.createTenant("acme")
	h.createTenant("globex")
	for _, tenant := range []string{"acme", "globex"} {
		h.must(http.StatusCreated, "PUT", "/v1/tenants/"+tenant+"/rules/api", testAdminToken, plansRule("/api*"))
		h.must(http.StatusCreated, "PUT", "/v1/tenants/"+tenant+"/rules/web", testAdminToken, plansRule("/web*"))
	}
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api/overrides/a", testAdminToken, map[string]any{"subjects": "a", "limits": minuteLimit(3)})
	h.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/web/overrides/b", testAdminToken, map[string]any{"subjects": "b", "limits": minuteLimit(3)})
	r := h.must(http.StatusConflict, "PUT", "/v1/tenants/acme/rules/api/overrides/c", testAdminToken, map[string]any{"subjects": "c", "limits": minuteLimit(3)})
	if r.errorCode() != "tenant_cap_reached" || !strings.Contains(r.raw, "overrides") {
		t.Errorf("past the cap: %s", r.raw)
	}
	// Replacing is never refused; another tenant has its own cap.
	h.must(http.StatusOK, "PUT", "/v1/tenants/acme/rules/api/overrides/a", testAdminToken, map[string]any{"subjects": "a", "limits": minuteLimit(4)})
	h.must(http.StatusCreated, "PUT", "/v1/tenants/globex/rules/api/overrides/c", testAdminToken, map[string]any{"subjects": "c", "limits": minuteLimit(3)})
}

// TestOverrideExpiresOnEveryInstance runs two instances on one catalog and
// one store: an override written on one reaches the other through the
// change feed, and once its expires_at has passed neither applies it (it
// is judged at check time), the next most specific override applying
// instead, with no reload.
func TestOverrideExpiresOnEveryInstance(t *testing.T) {
	dsn := testenv.Postgres(t)
	rs := sharedStore(t)
	a := newHarness(t, harnessOptions{dsn: dsn, store: rs})
	b := newHarness(t, harnessOptions{dsn: dsn, store: rs})
	a.createTenant("acme")
	key, _ := a.createKey("acme", "check")
	a.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))
	a.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api/overrides/all-customers", testAdminToken,
		map[string]any{"subjects": "cust-*", "limits": minuteLimit(5)})
	expires := time.Now().Add(2 * time.Second)
	a.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api/overrides/launch-week", testAdminToken,
		map[string]any{"subjects": "cust-42", "limits": minuteLimit(10), "expires_at": expires.UTC().Format(time.RFC3339Nano)})

	overrideOn := func(h *harness) any {
		return h.check(key, map[string]any{"route": "/api/x", "subject": "cust-42", "cost": 0}).body["override"]
	}
	testenv.Eventually(t, 5*time.Second, "the override reaching the second instance", func() bool {
		return time.Now().Before(expires) && overrideOn(b) == "launch-week"
	})
	if time.Now().Before(expires) {
		if got := overrideOn(a); got != "launch-week" {
			t.Fatalf("before expiry, instance a applies %v", got)
		}
	}
	time.Sleep(time.Until(expires) + time.Millisecond)
	for name, h := range map[string]*harness{"a": a, "b": b} {
		if got := overrideOn(h); got != "all-customers" {
			t.Errorf("instance %s after expiry applies %v, want the next most specific, all-customers", name, got)
		}
	}
	// Still listed, with its expiry, until deleted.
	a.must(http.StatusOK, "GET", "/v1/tenants/acme/rules/api/overrides/launch-week", testAdminToken, nil)
}

// TestOverrideChangeDropsCachedDenies: a subject denied under the rule's
// limits is admitted at once on every instance when an override raises
// them, without waiting out the deny cache.
func TestOverrideChangeDropsCachedDenies(t *testing.T) {
	dsn := testenv.Postgres(t)
	rs := sharedStore(t)
	a := newHarness(t, harnessOptions{dsn: dsn, store: rs})
	b := newHarness(t, harnessOptions{dsn: dsn, store: rs})
	a.createTenant("acme")
	key, _ := a.createKey("acme", "check")
	a.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api", testAdminToken, plansRule("/api*"))
	body := map[string]any{"route": "/api/x", "subject": "bigco"}
	testenv.Eventually(t, 5*time.Second, "the rule reaching instance b", func() bool {
		return b.check(key, body).status == http.StatusTooManyRequests
	})
	for _, h := range []*harness{a, b} {
		if r := h.check(key, body); r.status != http.StatusTooManyRequests {
			t.Fatalf("over the rule's 2 a minute: %d", r.status)
		}
	}
	a.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/api/overrides/bigco", testAdminToken,
		map[string]any{"subjects": "bigco", "limits": minuteLimit(1000)})
	testenv.Eventually(t, 5*time.Second, "the override admitting bigco on instance b", func() bool {
		return b.check(key, body).status == http.StatusOK
	})
	if r := a.check(key, body); r.status != http.StatusOK || r.body["override"] != "bigco" {
		t.Errorf("instance a after the override: %d %s", r.status, r.raw)
	}
}

// sharedStore is one store for two instances of one process.
func sharedStore(t *testing.T) sluice.Store {
	ms := memory.New(memory.Options{})
	t.Cleanup(func() { ms.Close() })
	return ms
}
