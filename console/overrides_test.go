package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestConsoleShowsPlansAndOverrides: the rules page names a rule's plans
// and links to a read-only page of its plans and overrides; editing the
// rule's limits in the form keeps its plans (and so its overrides, which
// may set a plan's limit).
func TestConsoleShowsPlansAndOverrides(t *testing.T) {
	s := newStack(t)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/search", adminToken, `{"route":"/v1/search*",
		"limits":[{"name":"minute","algorithm":"sliding_window","limit":100,"window":"1m"}],
		"plans":{"pro":[{"name":"minute","algorithm":"sliding_window","limit":1000,"window":"1m"},{"name":"day","algorithm":"fixed_window","limit":50000,"window":"1d"}]}}`); status != http.StatusCreated {
		t.Fatalf("put rule: %d %s", status, raw)
	}
	for _, o := range []struct{ name, body string }{
		{"launch-week", `{"subjects":"cust-17","limits":[{"name":"day","algorithm":"fixed_window","limit":500000,"window":"1d"}],"expires_at":"2099-12-09T00:00:00Z"}`},
		{"partners", `{"subjects":["partner-*"],"limits":[{"name":"minute","algorithm":"sliding_window","limit":5000,"window":"1m"}]}`},
	} {
		if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/search/overrides/"+o.name, adminToken, o.body); status != http.StatusCreated {
			t.Fatalf("put override %s: %d %s", o.name, status, raw)
		}
	}
	b := s.browser()
	b.signIn(adminToken)
	must(t, "rules", b.get("/console/tenants/acme/rules"), http.StatusOK, `<span class="plan">pro</span>`, "/rules/search/overrides")
	must(t, "plans and overrides", b.get("/console/tenants/acme/rules/search/overrides"), http.StatusOK,
		`id="plans"`, "minute: 1000 per sliding 1m", `id="overrides"`, "launch-week", "<code>cust-17</code>", "2099-12-09T00:00:00Z",
		"<code>partner-*</code>", "never")

	// Edit the rule's own limit in the form: the plans stay.
	form := url.Values{"editing": {"true"}, "name": {"search"}, "route": {"/v1/search*"}, "failure_mode": {""},
		"algorithm0": {"sliding_window"}, "limit_name0": {"minute"}, "amount0": {"200"}, "window0": {"1m"}}
	if p := b.post("/console/tenants/acme/rules", form); p.status != http.StatusSeeOther {
		t.Fatalf("edit rule: %d\n%s", p.status, p.body)
	}
	if _, raw := s.apiCall("GET", "/v1/tenants/acme/rules/search", adminToken, ""); !strings.Contains(raw, `"limit":200`) || !strings.Contains(raw, `"plans":{"pro"`) {
		t.Errorf("rule after the edit lost its plans or its change: %s", raw)
	}
}

// TestConsoleCreatesAndDeletesOverrides: the overrides page creates an
// override through the admin API (so it applies to checks and is audited),
// shows the API's refusal of a bad one beside its field with nothing
// changed, replaces one, and deletes one after asking.
func TestConsoleCreatesAndDeletesOverrides(t *testing.T) {
	s := newStack(t)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/search", adminToken, `{"route":"/v1/search*",
		"limits":[{"name":"minute","algorithm":"sliding_window","limit":100,"window":"1m"}]}`); status != http.StatusCreated {
		t.Fatalf("put rule: %d %s", status, raw)
	}
	status, raw := s.apiCall("POST", "/v1/tenants/acme/keys", adminToken, `{"name":"web","role":"check"}`)
	if status != http.StatusCreated {
		t.Fatalf("create key: %d %s", status, raw)
	}
	var key struct{ Secret string }
	if err := json.Unmarshal([]byte(raw), &key); err != nil {
		t.Fatal(err)
	}
	check := func(subject string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/check", strings.NewReader(`{"route":"/v1/search","subject":"`+subject+`"}`))
		req.Header.Set("X-API-Key", key.Secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	overrides := func() string {
		t.Helper()
		_, raw := s.apiCall("GET", "/v1/tenants/acme/rules/search/overrides", adminToken, "")
		return raw
	}

	b := s.browser()
	b.signIn(adminToken)
	page := "/console/tenants/acme/rules/search/overrides"
	must(t, "the form", b.get(page), http.StatusOK, `id="override-form"`, `name="override_name"`, `name="subjects"`,
		`name="expires_at"`, "Expires at (UTC)", "read as UTC", `name="algorithm0"`, "<code>minute</code>")

	form := func(name, subjects, expires, limitName, amount string) url.Values {
		return url.Values{"override_name": {name}, "subjects": {subjects}, "expires_at": {expires},
			"algorithm0": {"sliding_window"}, "limit_name0": {limitName}, "amount0": {amount}, "window0": {"1m"}}
	}
	// A datetime-local value (no offset) is read as UTC.
	p := b.post(page, form("launch-week", "cust-17, partner-*\nvip-9", "2099-12-09T00:00", "minute", "5000"))
	if p.status != http.StatusSeeOther || p.header.Get("Location") != page {
		t.Fatalf("create: %d %s\n%s", p.status, p.header.Get("Location"), p.body)
	}
	must(t, "listed", b.get(page), http.StatusOK, "Override launch-week of rule search created.", "launch-week",
		"<code>cust-17</code>", "<code>partner-*</code>", "<code>vip-9</code>", "minute: 5000 per sliding 1m", "2099-12-09T00:00:00Z",
		"/overrides/launch-week/delete", "/overrides/launch-week/edit")
	if got := check("partner-3"); !strings.Contains(got, `"override":"launch-week"`) || !strings.Contains(got, `"limit":5000`) {
		t.Errorf("a check of partner-3 does not apply the override: %s", got)
	}
	if got := check("someone"); strings.Contains(got, "override") || !strings.Contains(got, `"limit":100`) {
		t.Errorf("a check of another subject: %s", got)
	}
	must(t, "audit", b.get("/console/audit?action=override.create"), http.StatusOK, "override.create", "search/launch-week", "partner-*")

	// Bad input: the API's message on the page, beside its field, the input
	// kept, and nothing changed.
	before := overrides()
	for _, bad := range []struct {
		what   string
		form   url.Values
		status int
		want   string
	}{
		{"a subject another override claims", form("partners", "partner-*", "", "minute", "10"), http.StatusConflict,
			`id="err-subjects"`},
		{"a limit the rule does not have", form("typo", "cust-99", "", "minutes", "10"), http.StatusBadRequest,
			`id="err-limit0"`},
		{"an expiry in the past", form("late", "cust-98", "2001-01-01T00:00:00Z", "minute", "10"), http.StatusBadRequest,
			`id="err-expires_at"`},
		{"an expiry that is no time", form("late", "cust-98", "next week", "minute", "10"), http.StatusBadRequest,
			`id="err-expires_at"`},
		{"no subjects", form("empty", " , ", "", "minute", "10"), http.StatusBadRequest, `id="err-subjects"`},
		{"a name taken", form("launch-week", "cust-97", "", "minute", "10"), http.StatusConflict, "already has an override named launch-week"},
		{"no name", form("", "cust-97", "", "minute", "10"), http.StatusBadRequest, `id="err-override_name"`},
		{"an amount that is no number", form("nan", "cust-96", "", "minute", "ten"), http.StatusBadRequest, `id="err-limit0"`},
	} {
		p := b.post(page, bad.form)
		must(t, bad.what, p, bad.status, bad.want, `role="alert"`, `id="override-form"`)
		if name := bad.form.Get("override_name"); name != "" && !strings.Contains(p.body, `value="`+name+`"`) {
			t.Errorf("%s: the form lost its input", bad.what)
		}
		if after := overrides(); after != before {
			t.Fatalf("%s changed the overrides:\n%s\n%s", bad.what, before, after)
		}
	}
	// The API's own words are shown.
	must(t, "duplicate message", b.post(page, form("partners", "partner-*", "", "minute", "10")), http.StatusConflict,
		"already claimed by override")
	must(t, "limit message", b.post(page, form("typo", "cust-99", "", "minutes", "10")), http.StatusBadRequest,
		"has no limit named")
	must(t, "past message", b.post(page, form("late", "cust-98", "2001-01-01T00:00:00Z", "minute", "10")), http.StatusBadRequest,
		"is in the past")

	// An admin key of another tenant is refused as the API refuses it.
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"globex"}`)
	_, raw = s.apiCall("POST", "/v1/tenants/globex/keys", adminToken, `{"role":"admin"}`)
	var other struct{ Secret string }
	if err := json.Unmarshal([]byte(raw), &other); err != nil {
		t.Fatal(err)
	}
	ob := s.browser()
	ob.signIn(other.Secret)
	must(t, "another tenant's form", ob.post(page, form("sneaky", "cust-1", "", "minute", "1")), http.StatusForbidden, "belongs to another tenant")
	must(t, "another tenant's delete", ob.post(page+"/launch-week/delete", url.Values{"confirm": {"yes"}}), http.StatusForbidden)
	if after := overrides(); after != before {
		t.Fatalf("another tenant changed the overrides:\n%s\n%s", before, after)
	}

	// Replace: the edit page fills the form; saving replaces the override.
	must(t, "edit", b.get(page+"/launch-week/edit"), http.StatusOK, "Replace override launch-week", `value="launch-week" readonly`,
		"cust-17\npartner-*\nvip-9", `value="2099-12-09T00:00:00Z"`, `value="5000"`)
	replace := form("launch-week", "cust-17", "", "minute", "7000")
	replace.Set("editing", "true")
	if p := b.post(page, replace); p.status != http.StatusSeeOther {
		t.Fatalf("replace: %d\n%s", p.status, p.body)
	}
	p = b.get(page)
	must(t, "replaced", p, http.StatusOK, "Override launch-week of rule search replaced.", "minute: 7000 per sliding 1m")
	if strings.Contains(p.body, "2099-12-09") || strings.Contains(p.body, "<code>vip-9</code>") {
		t.Errorf("the replaced override kept its old expiry or subjects:\n%s", p.body)
	}
	if got := check("partner-3"); strings.Contains(got, "override") {
		t.Errorf("partner-3 still gets the override after it was replaced without it: %s", got)
	}

	// Delete: asked first (a post without the confirmation changes
	// nothing), then gone, and audited.
	must(t, "confirm", b.get(page+"/launch-week/delete"), http.StatusOK, "Delete override launch-week", `id="confirm-button"`)
	must(t, "unconfirmed", b.post(page+"/launch-week/delete", url.Values{}), http.StatusBadRequest, "Nothing was changed")
	if !strings.Contains(overrides(), "launch-week") {
		t.Fatal("an unconfirmed delete deleted the override")
	}
	forged := b.post(page+"/launch-week/delete", url.Values{"confirm": {"yes"}, "csrf": {"forged"}})
	if forged.status != http.StatusForbidden || !strings.Contains(overrides(), "launch-week") {
		t.Fatalf("a delete without the CSRF token: %d", forged.status)
	}
	if p := b.post(page+"/launch-week/delete", url.Values{"confirm": {"yes"}}); p.status != http.StatusSeeOther || p.header.Get("Location") != page {
		t.Fatalf("delete: %d %s\n%s", p.status, p.header.Get("Location"), p.body)
	}
	p = b.get(page)
	must(t, "deleted", p, http.StatusOK, "Override launch-week of rule search deleted.", "No overrides")
	if strings.Contains(overrides(), "launch-week") {
		t.Fatal("the override is still stored")
	}
	if got := check("cust-17"); strings.Contains(got, "override") {
		t.Errorf("cust-17 still gets the deleted override: %s", got)
	}
	must(t, "audit delete", b.get("/console/audit?action=override.delete"), http.StatusOK, "search/launch-week")
	must(t, "delete a gone one", b.post(page+"/launch-week/delete", url.Values{"confirm": {"yes"}}), http.StatusNotFound)
}

// TestConsoleKeepsOverrideFieldsItCannotShow: an override whose limits hold
// what the form has no field for (a credits refill) is not replaced from
// the form, which would drop it.
func TestConsoleKeepsOverrideFieldsItCannotShow(t *testing.T) {
	s := newStack(t)
	s.apiCall("POST", "/v1/tenants", adminToken, `{"name":"acme"}`)
	if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/api", adminToken, `{"route":"/v1/*",
		"limits":[{"name":"prepaid","algorithm":"credits","refill":{"every":"month","amount":1000,"mode":"set"}}]}`); status != http.StatusCreated {
		t.Fatalf("put rule: %d %s", status, raw)
	}
	if status, raw := s.apiCall("PUT", "/v1/tenants/acme/rules/api/overrides/big", adminToken,
		`{"subjects":"cust-1","limits":[{"name":"prepaid","algorithm":"credits","refill":{"every":"month","amount":50000,"mode":"set"}}]}`); status != http.StatusCreated {
		t.Fatalf("put override: %d %s", status, raw)
	}
	_, before := s.apiCall("GET", "/v1/tenants/acme/rules/api/overrides/big", adminToken, "")
	b := s.browser()
	b.signIn(adminToken)
	page := "/console/tenants/acme/rules/api/overrides"
	must(t, "edit", b.get(page+"/big/edit"), http.StatusOK, "which this form cannot show")
	form := url.Values{"editing": {"true"}, "override_name": {"big"}, "subjects": {"cust-1"}}
	must(t, "replace", b.post(page, form), http.StatusConflict, "which this form cannot show")
	if _, after := s.apiCall("GET", "/v1/tenants/acme/rules/api/overrides/big", adminToken, ""); after != before {
		t.Fatalf("the override changed:\n%s\n%s", before, after)
	}
}
