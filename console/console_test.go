package console_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicelabs/sluice/console"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/middleware"
)

func TestSignIn(t *testing.T) {
	s := newStack(t)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	_, raw := s.apiCall("POST", "/v1/tenants/acme/keys", adminToken, `{"role":"check"}`)
	var checkKey struct{ Secret string }
	_ = json.Unmarshal([]byte(raw), &checkKey)

	b := s.browser()
	must(t, "console before sign-in", b.get("/console/"), http.StatusOK, `id="secret"`, "Sign in")
	for _, tc := range []struct{ name, secret, want string }{
		{"empty", "", "Enter the operator token"},
		{"unknown", "sk_not_a_key", "unknown or has been revoked"},
		{"check key", checkKey.Secret, "has the check role"},
	} {
		p := b.post("/console/signin", url.Values{"secret": {tc.secret}})
		if p.status == http.StatusSeeOther || !strings.Contains(p.body, tc.want) {
			t.Errorf("%s: status %d, want a refusal saying %q:\n%s", tc.name, p.status, tc.want, p.body)
		}
		if tc.secret != "" && strings.Contains(p.body, tc.secret) {
			t.Errorf("%s: the page echoes the secret", tc.name)
		}
		if p.header.Get("Set-Cookie") != "" {
			t.Errorf("%s: a refused sign-in set a cookie: %s", tc.name, p.header.Get("Set-Cookie"))
		}
	}

	p := b.post("/console/signin", url.Values{"secret": {adminToken}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/" {
		t.Fatalf("operator sign-in: %d to %q", p.status, p.header.Get("Location"))
	}
	cookie := p.header.Get("Set-Cookie")
	for _, want := range []string{"sluice_console=", "Path=/console/", "HttpOnly", "SameSite=Strict", "Expires=", "Max-Age="} {
		if !strings.Contains(cookie, want) {
			t.Errorf("session cookie %q lacks %s", cookie, want)
		}
	}
	if strings.Contains(cookie, adminToken) || strings.Contains(cookie, "Secure") {
		t.Errorf("session cookie %q holds the token, or is Secure over plain HTTP", cookie)
	}
	for _, path := range []string{"/console/", "/console/tenants", "/console/live", "/console/live.json", "/console/envoy"} {
		p := b.get(path)
		if p.status != http.StatusOK || strings.Contains(p.body, adminToken) {
			t.Errorf("%s: status %d, or the page holds the token", path, p.status)
		}
	}
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	s := newStack(t)
	b := s.browser()
	b.signIn(adminToken)
	for _, path := range []string{"/console/signin", "/console/", "/console/tenants", "/console/static/console.js", "/console/nope"} {
		p := b.get(path)
		csp := p.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "style-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if p.header.Get("X-Frame-Options") != "DENY" || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, p.header)
		}
	}
	// Nothing inline that the policy would block: no script bodies, no
	// style attributes or elements, no event handler attributes.
	for _, path := range []string{"/console/", "/console/tenants"} {
		body := b.get(path).body
		for _, bad := range []*regexp.Regexp{regexp.MustCompile(`<script[^>]*>[^<]`), regexp.MustCompile(`\sstyle=`),
			regexp.MustCompile(`<style`), regexp.MustCompile(`\son[a-z]+=`)} {
			if bad.MatchString(body) {
				t.Errorf("%s: inline code %s", path, bad)
			}
		}
	}
}

// TestOperatorManagesTenantsKeysAndRules walks every page and action of the
// console as the operator, and checks each change through the JSON API.
func TestOperatorManagesTenantsKeysAndRules(t *testing.T) {
	s := newStack(t)
	b := s.browser()
	b.signIn(adminToken)
	must(t, "empty tenants", b.get("/console/tenants"), http.StatusOK, "No tenants yet")

	must(t, "bad tenant name", b.post("/console/tenants", url.Values{"name": {"Not A Slug"}}), http.StatusBadRequest,
		`aria-invalid="true"`, `id="tenant-name-error"`, `value="Not A Slug"`)
	p := b.post("/console/tenants", url.Values{"name": {"acme"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("create tenant: %d %s", p.status, p.body)
	}
	must(t, "tenants", b.get("/console/tenants"), http.StatusOK, "Tenant acme created.", `<th scope="row">acme</th>`, "Suspend")
	must(t, "tenant exists twice", b.post("/console/tenants", url.Values{"name": {"acme"}}), http.StatusConflict, "acme")

	b.post("/console/tenants/acme/status", url.Values{"status": {"suspended"}})
	if _, raw := s.apiCall("GET", "/v1/tenants/acme", adminToken, ""); !strings.Contains(raw, `"status":"suspended"`) {
		t.Errorf("after suspend: %s", raw)
	}
	must(t, "suspended", b.get("/console/tenants"), http.StatusOK, "Resume")
	b.post("/console/tenants/acme/status", url.Values{"status": {"active"}})
	if _, raw := s.apiCall("GET", "/v1/tenants/acme", adminToken, ""); !strings.Contains(raw, `"status":"active"`) {
		t.Errorf("after resume: %s", raw)
	}

	// Keys: the secret is shown on the page after the create, once.
	must(t, "no keys", b.get("/console/tenants/acme/keys"), http.StatusOK, "no API keys yet")
	p = b.post("/console/tenants/acme/keys", url.Values{"name": {"web"}, "role": {"check"}})
	if p.status != http.StatusSeeOther || strings.Contains(p.header.Get("Location"), "sk_") {
		t.Fatalf("create key: %d to %q", p.status, p.header.Get("Location"))
	}
	p = b.get("/console/tenants/acme/keys")
	m := regexp.MustCompile(`id="new-secret" readonly value="([^"]+)"`).FindStringSubmatch(p.body)
	if m == nil || !strings.Contains(p.body, `data-copy="new-secret"`) {
		t.Fatalf("keys page after a create shows no secret with a copy button:\n%s", p.body)
	}
	secret := m[1]
	if again := b.get("/console/tenants/acme/keys"); strings.Contains(again.body, secret) || !strings.Contains(again.body, "web") {
		t.Errorf("the secret is shown a second time, or the key is not listed")
	}
	must(t, "bad role", b.post("/console/tenants/acme/keys", url.Values{"role": {"root"}}), http.StatusBadRequest, `id="key-error"`)

	// Rules: the API's own message beside the field it is about.
	must(t, "new rule form", b.get("/console/tenants/acme/rules/new"), http.StatusOK, `id="rule-route"`, `id="algorithm0"`)
	rule := url.Values{"name": {"orders"}, "route": {"/orders*"}, "failure_mode": {""}, "algorithm0": {"token_bucket"},
		"limit_name0": {"burst"}, "amount0": {"2"}, "refill0": {""}}
	rule.Set("name", "")
	must(t, "rule without a name", b.post("/console/tenants/acme/rules", rule), http.StatusBadRequest, `id="err-name"`, "needs a name")
	rule.Set("name", "Bad Name")
	must(t, "rule with a bad name", b.post("/console/tenants/acme/rules", rule), http.StatusBadRequest, `id="err-name"`)
	rule.Set("name", "orders")
	rule.Set("amount0", "two")
	must(t, "not a number", b.post("/console/tenants/acme/rules", rule), http.StatusBadRequest, `id="err-limit0"`, `&#34;two&#34; is not a number`)
	rule.Set("amount0", "2")
	must(t, "limit missing refill", b.post("/console/tenants/acme/rules", rule), http.StatusBadRequest,
		`id="err-limit0"`, "needs capacity and refill_per_second")
	rule.Set("refill0", "0.001")
	rule.Set("route", "orders")
	p = b.post("/console/tenants/acme/rules", rule)
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, `id="err-route"`) {
		t.Fatalf("route without a slash: %d, want the error beside the route\n%s", p.status, p.body)
	}
	rule.Set("route", "/orders*")
	rule.Set("shadow", "on")
	if p := b.post("/console/tenants/acme/rules", rule); p.status != http.StatusSeeOther {
		t.Fatalf("save rule: %d\n%s", p.status, p.body)
	}
	must(t, "rules", b.get("/console/tenants/acme/rules"), http.StatusOK, "Rule orders saved.", "<code>/orders*</code>", "burst: token bucket of 2, refill 0.001/s", "default (closed)")
	must(t, "new rule under a taken name", b.post("/console/tenants/acme/rules", rule), http.StatusConflict,
		`id="err-name"`, "already exists")
	must(t, "edit form", b.get("/console/tenants/acme/rules/orders/edit"), http.StatusOK,
		`value="/orders*"`, `id="shadow" name="shadow" checked`, `value="burst"`, `value="0.001"`, "readonly")
	rule.Del("shadow")
	rule.Set("editing", "true")
	rule.Set("failure_mode", "open")
	if p := b.post("/console/tenants/acme/rules", rule); p.status != http.StatusSeeOther {
		t.Fatalf("replace rule: %d\n%s", p.status, p.body)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/acme/rules/orders", adminToken, ""); !strings.Contains(raw, `"failure_mode":"open","shadow":false`) {
		t.Errorf("rule after the edit: %s", raw)
	}

	// A concurrency limit: limit and lease TTL, the TTL in the window field.
	inflight := url.Values{"name": {"uploads"}, "route": {"/uploads*"}, "failure_mode": {""}, "algorithm0": {"concurrency"},
		"limit_name0": {"inflight"}, "amount0": {"3"}, "window0": {"45s"}}
	if p := b.post("/console/tenants/acme/rules", inflight); p.status != http.StatusSeeOther {
		t.Fatalf("save a concurrency rule: %d\n%s", p.status, p.body)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/acme/rules/uploads", adminToken, ""); !strings.Contains(raw, `"algorithm":"concurrency"`) || !strings.Contains(raw, `"ttl":"45s"`) {
		t.Errorf("concurrency rule as stored: %s", raw)
	}
	must(t, "concurrency edit form", b.get("/console/tenants/acme/rules/uploads/edit"), http.StatusOK,
		`value="concurrency" selected`, `value="45s"`)
	if status, raw := s.apiCall("DELETE", "/v1/tenants/acme/rules/uploads", adminToken, ""); status != http.StatusNoContent {
		t.Fatalf("delete the concurrency rule: %d %s", status, raw)
	}

	// Checks through the API show on the overview; the inspector peeks and
	// resets.
	for range 4 {
		s.apiCall("POST", "/v1/check", secret, `{"route":"/orders/1","subject":"user-42"}`)
	}
	must(t, "live", b.get("/console/live"), http.StatusOK, "acme/orders", `<td class="num denied">2</td>`, "user-42")
	var series struct{ Denied []float64 }
	if err := json.Unmarshal([]byte(b.get("/console/live.json").body), &series); err != nil || len(series.Denied) != 90 {
		t.Fatalf("live.json: %v %v", err, series)
	}
	must(t, "inspect", b.get("/console/tenants/acme/inspect?rule=orders&subject=user-42"), http.StatusOK,
		`<td class="num remaining">0</td>`, `id="reset-subject"`)
	p = b.post("/console/tenants/acme/inspect/reset", url.Values{"rule": {"orders"}, "subject": {"user-42"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("reset: %d %s", p.status, p.body)
	}
	must(t, "after reset", b.get(p.header.Get("Location")), http.StatusOK, "were reset", `<td class="num remaining">2</td>`)
	must(t, "inspect no subject", b.get("/console/tenants/acme/inspect?rule=orders&subject="), http.StatusOK,
		`<td class="num remaining">2</td>`, "(no subject) under orders")
	must(t, "inspect unknown rule", b.get("/console/tenants/acme/inspect?rule=nope&subject=x"), http.StatusNotFound, "nope")

	// Revoke, delete rule, delete tenant (with its confirmation).
	keyID := regexp.MustCompile(`/keys/([^/"]+)/revoke`).FindStringSubmatch(b.get("/console/tenants/acme/keys").body)[1]
	must(t, "revoke confirmation", b.get("/console/tenants/acme/keys/"+keyID+"/revoke"), http.StatusOK,
		"Revoke API key web", `name="confirm" value="yes"`, `id="confirm-button"`)
	must(t, "revoke without confirmation", b.post("/console/tenants/acme/keys/"+keyID+"/revoke", nil),
		http.StatusBadRequest, "Nothing was changed")
	if status, _ := s.apiCall("POST", "/v1/check", secret, `{"route":"/orders/1","subject":"user-7"}`); status != http.StatusOK {
		t.Fatalf("check after a revoke without its confirmation: %d, want 200 (the key still valid)", status)
	}
	must(t, "revoke with a wrong confirmation", b.post("/console/tenants/acme/keys/"+keyID+"/revoke", url.Values{"confirm": {"no"}}),
		http.StatusBadRequest, "Nothing was changed")
	p = b.post("/console/tenants/acme/keys/"+keyID+"/revoke", url.Values{"confirm": {"yes"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("confirmed revoke: %d\n%s", p.status, p.body)
	}
	if status, _ := s.apiCall("POST", "/v1/check", secret, `{"route":"/orders/1"}`); status != http.StatusUnauthorized {
		t.Errorf("check with the revoked key: %d", status)
	}
	must(t, "revoked", b.get("/console/tenants/acme/keys"), http.StatusOK, "revoked")
	for _, path := range []string{"/console/tenants", "/console/tenants/acme/keys"} {
		if p := b.get(path); strings.Contains(p.body, "0001-01-01") {
			t.Errorf("%s shows a zero date:\n%s", path, p.body)
		}
	}
	must(t, "delete rule confirmation", b.get("/console/tenants/acme/rules/orders/delete"), http.StatusOK,
		"Delete rule orders", `name="confirm" value="yes"`)
	must(t, "delete rule without confirmation", b.post("/console/tenants/acme/rules/orders/delete", nil),
		http.StatusBadRequest, "Nothing was changed")
	if status, _ := s.apiCall("GET", "/v1/tenants/acme/rules/orders", adminToken, ""); status != http.StatusOK {
		t.Fatalf("rule after a delete without its confirmation: %d, want it still there", status)
	}
	must(t, "confirm unknown rule", b.get("/console/tenants/acme/rules/nope/delete"), http.StatusNotFound)
	b.post("/console/tenants/acme/rules/orders/delete", url.Values{"confirm": {"yes"}})
	if status, _ := s.apiCall("GET", "/v1/tenants/acme/rules/orders", adminToken, ""); status != http.StatusNotFound {
		t.Errorf("rule after delete: %d", status)
	}
	must(t, "confirm page", b.get("/console/tenants/acme/delete"), http.StatusOK, "Type <strong>acme</strong> to confirm")
	must(t, "wrong confirmation", b.post("/console/tenants/acme/delete", url.Values{"confirm": {"acm"}}), http.StatusBadRequest, "nothing was deleted")
	if status, _ := s.apiCall("GET", "/v1/tenants/acme", adminToken, ""); status != http.StatusOK {
		t.Fatalf("tenant after a wrong confirmation: %d", status)
	}
	b.post("/console/tenants/acme/delete", url.Values{"confirm": {"acme"}})
	if status, _ := s.apiCall("GET", "/v1/tenants/acme", adminToken, ""); status != http.StatusNotFound {
		t.Errorf("tenant after delete: %d", status)
	}
	must(t, "envoy off", b.get("/console/envoy"), http.StatusOK, "is off on this instance")
}

// TestChangesNeedTheCSRFTokenAndTheSameOrigin: a post without the session's
// token, or from another site, is refused and changes nothing.
func TestChangesNeedTheCSRFTokenAndTheSameOrigin(t *testing.T) {
	s := newStack(t)
	b := s.browser()
	b.signIn(adminToken)
	post := func(form url.Values, header map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/console/tenants", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return b.do(req).status
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		header map[string]string
	}{
		{"no token", url.Values{"name": {"evil"}}, nil},
		{"wrong token", url.Values{"name": {"evil"}, "csrf": {"x" + b.csrf}}, nil},
		{"other origin", url.Values{"name": {"evil"}, "csrf": {b.csrf}}, map[string]string{"Origin": "https://evil.example"}},
		{"cross-site fetch", url.Values{"name": {"evil"}, "csrf": {b.csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if status := post(tc.form, tc.header); status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", tc.name, status)
		}
	}
	if status, _ := s.apiCall("GET", "/v1/tenants/evil", adminToken, ""); status != http.StatusNotFound {
		t.Fatalf("a refused post created the tenant (%d)", status)
	}
	if status := post(url.Values{"name": {"good"}, "csrf": {b.csrf}}, map[string]string{"Sec-Fetch-Site": "same-origin"}); status != http.StatusSeeOther {
		t.Errorf("same-origin post with the token: %d", status)
	}
	// Sign-in from another site (login CSRF) is refused too.
	other := s.browser()
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/console/signin", strings.NewReader(url.Values{"secret": {adminToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if p := other.do(req); p.status != http.StatusForbidden || p.header.Get("Set-Cookie") != "" {
		t.Errorf("cross-site sign-in: %d, cookie %q", p.status, p.header.Get("Set-Cookie"))
	}
}

// TestTenantKeySeesOnlyItsOwnTenant: a tenant's admin key manages its own
// tenant and is refused, by the API's own checks, everywhere else.
func TestTenantKeySeesOnlyItsOwnTenant(t *testing.T) {
	s := newStack(t)
	for _, name := range []string{"acme", "globex"} {
		s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"`+name+`"}`)
		s.apiCall("PUT", "/v1/tenants/"+name+"/rules/r", adminToken,
			`{"route":"*","limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]}`)
	}
	keys := map[string]string{}
	for _, k := range []string{"acme:admin", "acme:check", "globex:check"} {
		tenant, role, _ := strings.Cut(k, ":")
		_, raw := s.apiCall("POST", "/v1/tenants/"+tenant+"/keys", adminToken, `{"role":"`+role+`"}`)
		var key struct{ Secret string }
		_ = json.Unmarshal([]byte(raw), &key)
		keys[k] = key.Secret
	}
	for _, k := range []string{"acme:check", "globex:check"} {
		for range 2 {
			s.apiCall("POST", "/v1/check", keys[k], `{"route":"/x","subject":"`+k+`-subject"}`)
		}
	}

	b := s.browser()
	b.signIn(keys["acme:admin"])
	p := b.get("/console/tenants")
	must(t, "own tenants page", p, http.StatusOK, `<th scope="row">acme</th>`, "Tenant acme")
	if strings.Contains(p.body, "globex") || strings.Contains(p.body, `id="tenant-name"`) {
		t.Errorf("a tenant sees another tenant or the create form:\n%s", p.body)
	}
	live := b.get("/console/live")
	must(t, "own live", live, http.StatusOK, "acme/r", "acme:check-subject")
	if strings.Contains(live.body, "globex") {
		t.Errorf("live view shows another tenant's rules or subjects:\n%s", live.body)
	}
	must(t, "own keys", b.get("/console/tenants/acme/keys"), http.StatusOK, "admin")

	for _, path := range []string{"/console/tenants/globex/keys", "/console/tenants/globex/rules",
		"/console/tenants/globex/inspect?rule=r&subject=globex:check-subject", "/console/tenants/globex/rules/r/edit"} {
		must(t, path, b.get(path), http.StatusForbidden, "belongs to another tenant")
	}
	must(t, "envoy", b.get("/console/envoy"), http.StatusForbidden, "Only the operator")
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/console/tenants", url.Values{"name": {"mine"}}},
		{"/console/tenants/globex/status", url.Values{"status": {"suspended"}}},
		{"/console/tenants/globex/delete", url.Values{"confirm": {"globex"}}},
		{"/console/tenants/globex/keys", url.Values{"role": {"admin"}}},
		{"/console/tenants/globex/rules", url.Values{"name": {"r"}, "route": {"/y"}, "algorithm0": {"fixed_window"}, "amount0": {"5"}, "window0": {"1m"}}},
		{"/console/tenants/globex/rules/r/delete", nil},
		{"/console/tenants/globex/inspect/reset", url.Values{"rule": {"r"}, "subject": {"globex:check-subject"}}},
	} {
		if p := b.post(tc.path, tc.form); p.status != http.StatusForbidden {
			t.Errorf("POST %s: status %d, want 403\n%s", tc.path, p.status, p.body)
		}
	}
	// Nothing of globex changed.
	if _, raw := s.apiCall("GET", "/v1/tenants/globex", adminToken, ""); !strings.Contains(raw, `"status":"active"`) {
		t.Errorf("globex: %s", raw)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/globex/rules/r", adminToken, ""); !strings.Contains(raw, `"route":"*"`) {
		t.Errorf("globex's rule: %s", raw)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/globex/rules/r/subjects/globex:check-subject", adminToken, ""); !strings.Contains(raw, `"remaining":0`) {
		t.Errorf("globex's subject was reset: %s", raw)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/globex/keys", adminToken, ""); strings.Count(raw, `"id"`) != 1 {
		t.Errorf("globex's keys: %s", raw)
	}
	if status, _ := s.apiCall("GET", "/v1/tenants/mine", adminToken, ""); status != http.StatusNotFound {
		t.Errorf("a tenant key created a tenant")
	}
}

func TestSignOutAndRevocationEndTheSession(t *testing.T) {
	s := newStack(t)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	b := s.browser()
	b.signIn(adminToken)
	stolen := b.c.Jar.Cookies(mustURL(t, s.srv.URL+"/console/"))
	p := b.post("/console/signout", nil)
	must(t, "sign-out", p, http.StatusOK, "You are signed out.")
	must(t, "after sign-out", b.get("/console/tenants"), http.StatusOK, `id="secret"`)
	// The old cookie, replayed, opens nothing.
	replay := s.browser()
	replay.c.Jar.SetCookies(mustURL(t, s.srv.URL+"/console/"), stolen)
	must(t, "replayed cookie", replay.get("/console/tenants"), http.StatusOK, `id="secret"`)
	if p := replay.get("/console/live.json"); p.status != http.StatusUnauthorized {
		t.Errorf("live.json after sign-out: %d", p.status)
	}

	// A tenant whose key is revoked elsewhere is signed out at its next page.
	_, raw := s.apiCall("POST", "/v1/tenants/acme/keys", adminToken, `{"role":"admin"}`)
	var key struct{ ID, Secret string }
	_ = json.Unmarshal([]byte(raw), &key)
	tb := s.browser()
	tb.signIn(key.Secret)
	must(t, "tenant signed in", tb.get("/console/tenants/acme/rules"), http.StatusOK, "No rules yet")
	s.apiCall("DELETE", "/v1/tenants/acme/keys/"+key.ID, adminToken, "")
	must(t, "after revocation", tb.get("/console/tenants/acme/rules"), http.StatusOK, "You were signed out", `id="secret"`)
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestEnvoyDomainsAreShownReadOnly(t *testing.T) {
	d, err := envoyrls.ParseDomain("/etc/ratelimit/edge.yaml", []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyrls.NewConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	s := newStackWith(t, false, func(o *console.Options) { o.EnvoyConfig = func() *envoyrls.Config { return cfg } })
	b := s.browser()
	b.signIn(adminToken)
	p := b.get("/console/envoy")
	must(t, "envoy", p, http.StatusOK, `<h2 id="domain-edge">edge</h2>`, "/etc/ratelimit/edge.yaml",
		"<code>remote_address</code>", "unlimited")
	if n := strings.Count(p.body, "<form"); n != 1 { // the sign-out form only
		t.Errorf("the Envoy page has %d forms, want only sign-out's: it is read-only", n)
	}
}

func TestSessionCookieIsSecureUnderTLS(t *testing.T) {
	s := newStackWith(t, true, nil)
	p := s.browser().post("/console/signin", url.Values{"secret": {adminToken}})
	if cookie := p.header.Get("Set-Cookie"); p.status != http.StatusSeeOther || !strings.Contains(cookie, "; Secure") {
		t.Errorf("sign-in over TLS: %d, cookie %q; want a Secure cookie", p.status, cookie)
	}
}

// TestSessionCookieIsSecureBehindATrustedTLSProxy: X-Forwarded-Proto:
// https from a trusted proxy makes the cookie Secure; the same header from
// a client the console was not told to trust does not.
func TestSessionCookieIsSecureBehindATrustedTLSProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted bool
	}{{"trusted_proxy", true}, {"untrusted_client", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStackWith(t, false, func(o *console.Options) {
				if tc.trusted {
					o.OverTLS = console.ForwardedTLS(middleware.TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
				}
			})
			form := url.Values{"secret": {adminToken}}
			req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/console/signin", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", s.srv.URL)
			req.Header.Set("X-Forwarded-Proto", "https")
			p := s.browser().do(req)
			cookie := p.header.Get("Set-Cookie")
			if p.status != http.StatusSeeOther || strings.Contains(cookie, "; Secure") != tc.trusted {
				t.Errorf("sign-in with X-Forwarded-Proto https: %d, cookie %q; want Secure: %v", p.status, cookie, tc.trusted)
			}
		})
	}
}

// signInStatus posts a sign-in form with secret, as a fresh browser (no
// cookie) behind a proxy that reports client as the address, and returns
// the status and the session cookie it set.
func (s *stack) signInStatus(secret, client string) (int, *http.Cookie, http.Header) {
	form := url.Values{"secret": {secret}}
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/console/signin", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.srv.URL)
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	for _, ck := range resp.Cookies() {
		if ck.Name == "sluice_console" {
			return resp.StatusCode, ck, resp.Header
		}
	}
	return resp.StatusCode, nil, resp.Header
}

// TestOneCredentialCannotSignOthersOut: 10,000 sign-ins with one tenant's
// admin key end only that key's own oldest sessions; the operator's two
// sessions, and another tenant's, stay signed in.
func TestOneCredentialCannotSignOthersOut(t *testing.T) {
	s := newStack(t)
	var keys []string
	for _, tenant := range []string{"acme", "beta"} {
		s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"`+tenant+`"}`)
		_, raw := s.apiCall("POST", "/v1/tenants/"+tenant+"/keys", adminToken, `{"role":"admin"}`)
		var k struct{ Secret string }
		_ = json.Unmarshal([]byte(raw), &k)
		keys = append(keys, k.Secret)
	}
	acme, beta := keys[0], keys[1]
	others := []*browser{s.browser(), s.browser(), s.browser()}
	others[0].signIn(adminToken)
	others[1].signIn(adminToken)
	others[2].signIn(beta)
	firstAcme := s.browser()
	firstAcme.signIn(acme)

	const signIns = 10_000
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var last []*http.Cookie
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				status, ck, _ := s.signInStatus(acme, "")
				mu.Lock()
				statuses[status]++
				if ck != nil {
					last = append(last, ck)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range signIns {
		next <- i
	}
	close(next)
	wg.Wait()
	if statuses[http.StatusSeeOther] != signIns {
		t.Errorf("sign-ins with one key answered %v, want %d times 303", statuses, signIns)
	}

	for i, b := range others {
		must(t, fmt.Sprintf("session %d of another credential after %d sign-ins with acme's key", i, signIns), b.get("/console/tenants"), http.StatusOK)
	}
	if p := firstAcme.get("/console/tenants"); p.status == http.StatusOK && !strings.Contains(p.body, `id="secret"`) {
		t.Errorf("acme's first session outlived %d newer sign-ins with the same key", signIns)
	}
	// The key's newest sessions are the ones kept.
	alive := 0
	for _, ck := range last[len(last)-console.MaxSessionsPerCredential:] {
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/console/tenants/acme/keys", nil)
		req.AddCookie(ck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && !strings.Contains(string(body), `id="secret"`) {
			alive++
		}
	}
	if alive == 0 {
		t.Errorf("none of acme's %d newest sessions is signed in", console.MaxSessionsPerCredential)
	}
}

// TestSignInFailuresAreThrottledPerAddress: 3,000 wrong secrets sent at
// once from one address get at most 100 judged answers (401), the rest 429
// with Retry-After, and few log lines; an X-Forwarded-For the console was
// not told to trust changes nothing; another address, reported by a trusted
// proxy, still signs in.
func TestSignInFailuresAreThrottledPerAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted bool
	}{{"peer_address", false}, {"behind_a_trusted_proxy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lineCounter
			s := newStackWith(t, false, func(o *console.Options) {
				o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				if tc.trusted {
					o.ClientAddr = middleware.ClientIP(middleware.TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
				}
			})
			const attempts = 3000
			var wg sync.WaitGroup
			var mu sync.Mutex
			statuses := map[int]int{}
			badRetry := 0
			next := make(chan int)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						// Untrusted, the header is the attacker's to choose.
						client := "203.0.113.7"
						if !tc.trusted {
							client = fmt.Sprintf("198.51.100.%d", i%250)
						}
						status, _, h := s.signInStatus(fmt.Sprintf("sk_wrong_%d", i), client)
						mu.Lock()
						statuses[status]++
						if status == http.StatusTooManyRequests {
							// Up to two windows: failures of this minute still
							// weigh on the next one (sliding window).
							if n, err := strconv.Atoi(h.Get("Retry-After")); err != nil || n < 1 || n > 120 {
								badRetry++
							}
						}
						mu.Unlock()
					}
				}()
			}
			for i := range attempts {
				next <- i
			}
			close(next)
			wg.Wait()
			if judged := statuses[http.StatusUnauthorized]; judged > 100 || judged == 0 || statuses[http.StatusTooManyRequests] != attempts-judged {
				t.Errorf("%d wrong secrets from one address answered %v; want at most 100 judged (401), the rest 429", attempts, statuses)
			}
			if badRetry > 0 {
				t.Errorf("%d answers 429 without a Retry-After of 1 to 120 seconds", badRetry)
			}
			if n := logs.count(); n > 200 {
				t.Errorf("%d refused sign-ins wrote %d log lines", attempts, n)
			}
			// The right secret from the throttled address waits too: it
			// cannot be told from a guess without being judged.
			if status, _, _ := s.signInStatus(adminToken, "203.0.113.7"); status != http.StatusTooManyRequests {
				t.Errorf("the operator token from the throttled address: %d, want 429", status)
			}
			other := "192.0.2.55"
			status, ck, _ := s.signInStatus(adminToken, other)
			if tc.trusted && (status != http.StatusSeeOther || ck == nil) {
				t.Errorf("the operator token from another address behind the trusted proxy: %d, want 303", status)
			}
			if !tc.trusted && status != http.StatusTooManyRequests {
				t.Errorf("an untrusted X-Forwarded-For got a fresh limit: %d, want 429", status)
			}
		})
	}
}

// lineCounter counts log lines written to it.
type lineCounter struct {
	mu sync.Mutex
	n  int
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

func (l *lineCounter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// TestRulesPageSaysEachLimitInWords: every algorithm reads as a sentence
// (a concurrency limit with its lease, not "2 per"), and a rule stored
// without a failure mode names the instance's default.
func TestRulesPageSaysEachLimitInWords(t *testing.T) {
	s := newStackFull(t, false, "open", nil)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	for name, body := range map[string]string{
		"bucket":   `{"route":"/a*","limits":[{"name":"burst","algorithm":"token_bucket","capacity":10,"refill_per_second":2.5}],"failure_mode":"local"}`,
		"sliding":  `{"route":"/b*","limits":[{"name":"minute","algorithm":"sliding_window","limit":100,"window":"1m"}]}`,
		"fixed":    `{"route":"/c*","limits":[{"name":"hour","algorithm":"fixed_window","limit":1000,"window":"1h"}]}`,
		"inflight": `{"route":"/d*","limits":[{"name":"uploads","algorithm":"concurrency","limit":2,"ttl":"30s"}]}`,
	} {
		if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/"+name, adminToken, body); status != http.StatusOK && status != http.StatusCreated {
			t.Fatalf("put rule %s: %d %s", name, status, raw)
		}
	}
	b := s.browser()
	b.signIn(adminToken)
	p := b.get("/console/tenants/acme/rules")
	must(t, "rules", p, http.StatusOK,
		"burst: token bucket of 10, refill 2.5/s",
		"minute: 100 per sliding 1m",
		"hour: 1000 per fixed 1h",
		"uploads: 2 at once, lease 30s",
		"<td>local</td>",
		"<td>default (open)</td>")
	if strings.Contains(p.body, " per </li>") || strings.Contains(p.body, "<td></td>") {
		t.Errorf("a limit or failure mode is left blank:\n%s", p.body)
	}
	if n := strings.Count(p.body, "default (open)"); n != 3 {
		t.Errorf("%d rules say the default failure mode, want the 3 stored without one", n)
	}
}

// TestAuditPage: the operator sees every tenant's changes, filters them and
// pages back with before; a tenant admin key sees its own tenant's only,
// and asking for another's is refused; a bad filter is said in a sentence.
func TestAuditPage(t *testing.T) {
	s := newStack(t)
	for _, name := range []string{"acme", "globex"} {
		s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"`+name+`"}`)
	}
	// 60 rule changes of globex: more than one page of 50.
	for i := range 60 {
		s.apiCall("PUT", fmt.Sprintf("/v1/tenants/globex/rules/r%d", i), adminToken,
			fmt.Sprintf(`{"route":"/x%d*","limits":[{"algorithm":"fixed_window","limit":5,"window":"1m"}]}`, i))
	}
	_, raw := s.apiCall("POST", "/v1/tenants/acme/keys", adminToken, `{"role":"admin"}`)
	var key struct{ Secret string }
	if err := json.Unmarshal([]byte(raw), &key); err != nil {
		t.Fatal(err)
	}

	op := s.browser()
	op.signIn(adminToken)
	p := op.get("/console/audit")
	must(t, "audit", p, http.StatusOK, `href="/console/audit" aria-current="page"`, `id="audit"`, "<td>key.create</td>", "<td>rule.create</td>", `id="audit-older"`)
	if n := strings.Count(p.body, "<time "); n != 50 {
		t.Errorf("first page shows %d entries, want 50", n)
	}
	next := regexp.MustCompile(`id="audit-older" href="/console/audit\?([^"]+)"`).FindStringSubmatch(p.body)
	if next == nil || !strings.Contains(next[1], "before=") {
		t.Fatalf("no link to older entries:\n%s", p.body)
	}
	older := op.get("/console/audit?" + strings.ReplaceAll(next[1], "&amp;", "&"))
	must(t, "older", older, http.StatusOK, "tenant.create")
	// 2 tenants, 60 rules and 1 key: 63 changes (and perhaps the admin
	// token's), so the second page is the last.
	if n := strings.Count(older.body, "<time "); n < 13 || n >= 50 || strings.Contains(older.body, `id="audit-older"`) {
		t.Errorf("second page: %d entries, a link to more %v; want the last 13 or 14", n, strings.Contains(older.body, `id="audit-older"`))
	}
	filtered := op.get("/console/audit?tenant=acme&action=key.create")
	must(t, "filtered", filtered, http.StatusOK, "key.create")
	if strings.Contains(filtered.body, "<td>rule.create</td>") || strings.Count(filtered.body, "<time ") != 1 {
		t.Errorf("the filter tenant=acme action=key.create shows other entries:\n%s", filtered.body)
	}
	must(t, "bad since", op.get("/console/audit?since=yesterday"), http.StatusBadRequest, `id="audit-error"`, "is not a time")

	tenant := s.browser()
	tenant.signIn(key.Secret)
	own := tenant.get("/console/audit")
	must(t, "tenant audit", own, http.StatusOK, "Changes to tenant acme", "key.create")
	if strings.Contains(own.body, "globex") || strings.Contains(own.body, `id="audit-tenant"`) {
		t.Errorf("a tenant key's audit page shows another tenant, or the tenant filter:\n%s", own.body)
	}
	if p := tenant.get("/console/audit?tenant=globex"); p.status != http.StatusForbidden {
		t.Errorf("a tenant key asking for globex's audit: %d, want 403", p.status)
	}
}

// TestRuleFormKeepsCreditsAndTimeZones: the rules page says credits and
// calendar limits in words; the edit form, which has no field for a refill
// or a time zone, says so and refuses to save such a rule rather than drop
// them, and the rule is unchanged.
func TestRuleFormKeepsCreditsAndTimeZones(t *testing.T) {
	s := newStackFull(t, false, "open", nil)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	body := `{"route":"/a*","limits":[{"name":"credits","algorithm":"credits","refill":{"every":"month","amount":1000,"mode":"set"}},` +
		`{"name":"month","algorithm":"fixed_window","limit":500,"window":"month","time_zone":"Europe/Berlin"}]}`
	if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/paid", adminToken, body); status != http.StatusCreated {
		t.Fatalf("put rule: %d %s", status, raw)
	}
	b := s.browser()
	b.signIn(adminToken)
	must(t, "rules", b.get("/console/tenants/acme/rules"), http.StatusOK,
		"credits: credits, refill set 1000 every month", "month: 500 per calendar month (Europe/Berlin)")
	must(t, "edit form", b.get("/console/tenants/acme/rules/paid/edit"), http.StatusOK, "cannot show")
	form := url.Values{"name": {"paid"}, "editing": {"true"}, "route": {"/a*"}, "failure_mode": {""},
		"algorithm0": {"fixed_window"}, "limit_name0": {"month"}, "amount0": {"500"}, "window0": {"month"}}
	must(t, "save", b.post("/console/tenants/acme/rules", form), http.StatusConflict, "cannot show")
	if _, raw := s.apiCall("GET", "/v1/tenants/acme/rules/paid", adminToken, ""); !strings.Contains(raw, `"refill":{"every":"month","amount":1000,"mode":"set"}`) ||
		!strings.Contains(raw, `"time_zone":"Europe/Berlin"`) {
		t.Fatalf("the rule after a refused save: %s", raw)
	}
}
