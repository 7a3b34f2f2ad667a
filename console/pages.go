package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// pageNames are the templates under templates/, each rendered in layout.html.
var pageNames = []string{"signin", "overview", "tenants", "confirm-delete", "confirm", "keys", "rules", "rule-form", "overrides", "inspect", "envoy", "audit", "usage", "error"}

var funcs = template.FuncMap{
	"pathEscape":  url.PathEscape,
	"queryEscape": url.QueryEscape,
	"rate":        func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"add":         func(a, b int) int { return a + b },
	"list":        func(xs ...string) []string { return xs },
	"limitText":   limitText,
	"ms": func(ms int64) string {
		return (time.Duration(ms) * time.Millisecond).String()
	},
}

func parsePages() (map[string]*template.Template, error) {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/live.html", "templates/limit-rows.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what layout.html renders around a page.
type view struct {
	Title    string
	Page     string
	SignedIn bool
	Operator bool
	// Tenant is the tenant a page is about ("" on operator-wide pages).
	Tenant string
	// Own is the tenant of a tenant session.
	Own   string
	CSRF  string
	Flash string
	Data  any
}

var titles = map[string]string{
	"signin": "Sign in", "overview": "Overview", "tenants": "Tenants", "confirm-delete": "Delete tenant", "confirm": "Confirm",
	"keys": "API keys", "rules": "Rules", "rule-form": "Rule", "overrides": "Plans and overrides", "inspect": "Subject inspector", "envoy": "Envoy domains", "audit": "Audit log", "usage": "Usage", "error": "Error",
}

// render writes page name inside the layout.
func (c *Console) render(w http.ResponseWriter, r *http.Request, sess *session, status int, name string, data any) {
	v := view{Title: titles[name], Page: name, Data: data, Tenant: r.PathValue("tenant")}
	if p, ok := data.(confirmAction); ok {
		v.Title = p.Title
	}
	if sess != nil {
		v.SignedIn, v.Operator, v.Own, v.CSRF = true, sess.caller.Operator, sess.caller.Tenant, sess.csrf
		if v.Tenant == "" {
			v.Tenant = sess.caller.Tenant
		}
	}
	if sess != nil && name != "keys" {
		// The keys page takes the flash itself, with a new key's secret.
		v.Flash, _ = c.sessions.takeFlash(sess)
	} else if f, ok := data.(keysPage); ok {
		v.Flash = f.Flash
	}
	var b strings.Builder
	if err := c.pages[name].Execute(&b, v); err != nil {
		c.log.Error("console: render page", "page", name, "error", err)
		http.Error(w, "The console could not render this page; see the server log.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// renderError shows an error page; the message is a sentence for people.
func (c *Console) renderError(w http.ResponseWriter, r *http.Request, sess *session, status int, msg string) {
	c.render(w, r, sess, status, "error", errorPage{Status: status, Message: msg})
}

type errorPage struct {
	Status  int
	Message string
}

// redirect answers a form post with a redirect to page (POST/redirect/GET),
// leaving msg for it.
func (c *Console) redirect(w http.ResponseWriter, r *http.Request, sess *session, page, msg string) {
	if msg != "" {
		c.sessions.setFlash(sess, msg, nil)
	}
	http.Redirect(w, r, page, http.StatusSeeOther)
}

// get reads an admin API resource into v as the signed-in user; when the
// API refuses, it shows the API's answer and returns false.
func (c *Console) get(w http.ResponseWriter, r *http.Request, sess *session, path string, v any) bool {
	a := c.call(r, sess, http.MethodGet, path, nil)
	if !a.ok() {
		c.failed(w, r, sess, a)
		return false
	}
	if err := a.decode(v); err != nil {
		c.renderError(w, r, sess, http.StatusInternalServerError, err.Error())
		return false
	}
	return true
}

// change makes an admin API call that changes something, as the signed-in
// user; when the API refuses, it shows the API's answer and returns false.
func (c *Console) change(w http.ResponseWriter, r *http.Request, sess *session, method, path string, body any) bool {
	a := c.call(r, sess, method, path, body)
	if !a.ok() {
		c.failed(w, r, sess, a)
		return false
	}
	return true
}

// failed shows an API error on an error page with the API's own status and
// message.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, sess *session, a apiAnswer) {
	c.renderError(w, r, sess, a.Status, a.Message)
}

// --- sign-in

type signInPage struct{ Message string }

func (c *Console) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	if sess := c.sessions.get(r); sess != nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	c.render(w, r, nil, http.StatusOK, "signin", signInPage{})
}

func (c *Console) handleSignIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if !sameOrigin(r) {
		c.render(w, r, nil, http.StatusForbidden, "signin", signInPage{Message: "This sign-in form did not come from this console; open the console's own sign-in page."})
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("secret"))
	if secret == "" {
		c.render(w, r, nil, http.StatusBadRequest, "signin", signInPage{Message: "Enter the operator token or an admin-role API key of your tenant."})
		return
	}
	client := c.opts.ClientAddr(r)
	d, err := c.throttle.admit(r.Context(), client)
	if err != nil {
		c.logRefusal("console sign-in: the failure limit could not be checked", "client", client, "error", err.Error())
		w.Header().Set("Retry-After", "1")
		c.render(w, r, nil, http.StatusServiceUnavailable, "signin", signInPage{Message: "Sign-in is unavailable for a moment (the rate-limit store does not answer); try again shortly."})
		return
	}
	if !d.Allowed {
		ratelimitheader.Set(w.Header(), "signin", d)
		wait := ratelimitheader.RetryAfterSeconds(d.RetryAfter)
		c.logRefusal("console sign-in throttled", "client", client, "retry_after_s", wait)
		c.render(w, r, nil, http.StatusTooManyRequests, "signin", signInPage{Message: fmt.Sprintf(
			"Too many failed sign-ins from your address; try again in %d seconds.", wait)})
		return
	}
	caller, err := c.opts.API.AdminCaller(secret)
	if err != nil {
		c.throttle.failed(r.Context(), d.Hold)
		// The credential itself is never logged, nor echoed back.
		c.logRefusal("console sign-in refused", "client", client, "reason", err.Error())
		c.render(w, r, nil, http.StatusUnauthorized, "signin", signInPage{Message: err.Error()})
		return
	}
	c.throttle.succeeded(r.Context(), d.Hold)
	if old := c.sessions.get(r); old != nil {
		c.sessions.end(old)
	}
	sess, err := c.sessions.start(secret, caller)
	if err != nil {
		c.logRefusal("console sign-in refused", "client", client, "reason", err.Error())
		w.Header().Set("Retry-After", "60")
		c.render(w, r, nil, http.StatusServiceUnavailable, "signin", signInPage{Message: "Sign-in refused: " + err.Error() + "."})
		return
	}
	c.setCookie(w, r, sess)
	c.log.Info("console sign-in", "client", client, "operator", caller.Operator, "tenant", caller.Tenant)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logRefusal writes an INFO line about a refused sign-in, at most
// accesslog.ThrottleBurst per ThrottleWindow whatever the number of
// addresses trying; the next line written says how many were left out.
func (c *Console) logRefusal(msg string, args ...any) {
	ok, suppressed := c.refusals.Allow()
	if !ok {
		return
	}
	c.log.Info(msg, append(args, "suppressed_before", suppressed)...)
}

func (c *Console) handleSignOut(w http.ResponseWriter, r *http.Request, sess *session) {
	c.sessions.end(sess)
	c.clearCookie(w, r)
	c.render(w, r, nil, http.StatusOK, "signin", signInPage{Message: "You are signed out."})
}

// --- overview and live data

type overviewPage struct {
	StoreName      string
	StoreOK        bool
	Breaker        string
	CatalogVersion int64
	Rules          []RuleView
	WindowMinutes  int
	StepSeconds    int
	RateSeconds    int
}

// visible returns which rules' live data sess may see: all for the
// operator, a tenant's own HTTP rules for a tenant.
func visible(sess *session) func(metrics.Labels) bool {
	if sess.caller.Operator {
		return func(metrics.Labels) bool { return true }
	}
	tenant := sess.caller.Tenant
	return func(l metrics.Labels) bool { return l.Source == metrics.SourceHTTP && l.Tenant == tenant }
}

func (c *Console) overview(r *http.Request, sess *session) overviewPage {
	p := overviewPage{
		StoreName: c.opts.StoreName, StoreOK: true, Breaker: c.opts.Engine.BreakerState(),
		CatalogVersion: c.opts.API.CatalogVersion(), Rules: c.live.Snapshot(visible(sess)),
		WindowMinutes: liveWindow / 60, StepSeconds: StepSeconds, RateSeconds: RateSeconds,
	}
	if c.opts.StorePing != nil {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		// The error may name hosts; the page only says whether it answers.
		p.StoreOK = c.opts.StorePing(ctx) == nil
	}
	return p
}

func (c *Console) handleOverview(w http.ResponseWriter, r *http.Request, sess *session) {
	c.render(w, r, sess, http.StatusOK, "overview", c.overview(r, sess))
}

// handleLiveFragment is the part of the overview htmx refreshes.
func (c *Console) handleLiveFragment(w http.ResponseWriter, r *http.Request, sess *session) {
	var b strings.Builder
	if err := c.pages["overview"].ExecuteTemplate(&b, "live", c.overview(r, sess)); err != nil {
		c.log.Error("console: render live fragment", "error", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

// liveSeries is the chart's data: decisions per second of every visible
// rule, by outcome, in steps of StepSeconds ending now.
type liveSeries struct {
	Step         int       `json:"step"`
	Times        []int64   `json:"times"`
	Allowed      []float64 `json:"allowed"`
	Denied       []float64 `json:"denied"`
	ShadowDenied []float64 `json:"shadow_denied"`
	Degraded     []float64 `json:"degraded"`
}

func (c *Console) handleLiveJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	rules := c.live.Snapshot(visible(sess))
	n := liveWindow / StepSeconds
	end := c.live.now().Unix()
	out := liveSeries{Step: StepSeconds, Times: make([]int64, n), Allowed: make([]float64, n), Denied: make([]float64, n),
		ShadowDenied: make([]float64, n), Degraded: make([]float64, n)}
	for i := range n {
		out.Times[i] = end - int64(n-1-i)*StepSeconds
		var sum outcomeCounts
		for _, rv := range rules {
			sum.add(rv.Series[i])
		}
		out.Allowed[i] = float64(sum.Allowed) / StepSeconds
		out.Denied[i] = float64(sum.Denied) / StepSeconds
		out.ShadowDenied[i] = float64(sum.ShadowDenied) / StepSeconds
		out.Degraded[i] = float64(sum.Degraded) / StepSeconds
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// --- tenants

type tenantsPage struct {
	Tenants []adminapi.Tenant
	// Error and Name are a refused create's message and input.
	Error, Name string
}

func (c *Console) tenantsPage(w http.ResponseWriter, r *http.Request, sess *session, status int, p tenantsPage) {
	var body struct{ Tenants []adminapi.Tenant }
	if !c.get(w, r, sess, "/v1/tenants", &body) {
		return
	}
	p.Tenants = body.Tenants
	c.render(w, r, sess, status, "tenants", p)
}

func (c *Console) handleTenants(w http.ResponseWriter, r *http.Request, sess *session) {
	c.tenantsPage(w, r, sess, http.StatusOK, tenantsPage{})
}

func (c *Console) handleCreateTenant(w http.ResponseWriter, r *http.Request, sess *session) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	a := c.call(r, sess, http.MethodPost, "/v1/tenants", adminapi.CreateTenant{Name: name})
	if !a.ok() {
		c.tenantsPage(w, r, sess, a.Status, tenantsPage{Error: a.Message, Name: name})
		return
	}
	c.redirect(w, r, sess, Prefix+"tenants", fmt.Sprintf("Tenant %s created.", name))
}

func (c *Console) handleTenantStatus(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, status := r.PathValue("tenant"), r.PostFormValue("status")
	if !c.change(w, r, sess, http.MethodPatch, apiPath("tenants", tenant), adminapi.SetTenantStatus{Status: &status}) {
		return
	}
	c.redirect(w, r, sess, Prefix+"tenants", fmt.Sprintf("Tenant %s is now %s.", tenant, status))
}

// confirmPage asks to type a tenant's name before deleting it.
type confirmPage struct{ Name, Error string }

func (c *Console) handleConfirmDeleteTenant(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	a := c.call(r, sess, http.MethodGet, apiPath("tenants", tenant), nil)
	if !a.ok() {
		c.failed(w, r, sess, a)
		return
	}
	c.render(w, r, sess, http.StatusOK, "confirm-delete", confirmPage{Name: tenant})
}

func (c *Console) handleDeleteTenant(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	if r.PostFormValue("confirm") != tenant {
		c.render(w, r, sess, http.StatusBadRequest, "confirm-delete",
			confirmPage{Name: tenant, Error: "Type the tenant's name exactly to confirm; nothing was deleted."})
		return
	}
	if !c.change(w, r, sess, http.MethodDelete, apiPath("tenants", tenant), nil) {
		return
	}
	c.live.Forget(func(l metrics.Labels) bool { return l.Source == metrics.SourceHTTP && l.Tenant == tenant })
	c.redirect(w, r, sess, Prefix+"tenants", fmt.Sprintf("Tenant %s deleted, with its keys, rules and counters.", tenant))
}

// --- keys

type keysPage struct {
	Keys   []adminapi.Key
	NewKey *createdKey
	Flash  string
	// Error and Name, Role are a refused create's message and input.
	Error, Name, Role string
}

func (c *Console) keysPage(w http.ResponseWriter, r *http.Request, sess *session, status int, p keysPage) {
	tenant := r.PathValue("tenant")
	var body struct{ Keys []adminapi.Key }
	if !c.get(w, r, sess, apiPath("tenants", tenant, "keys"), &body) {
		return
	}
	p.Keys = body.Keys
	if p.Error == "" {
		p.Flash, p.NewKey = c.sessions.takeFlash(sess)
		if p.NewKey != nil && p.NewKey.Tenant != tenant {
			p.NewKey = nil
		}
	}
	if p.Role == "" {
		p.Role = "check"
	}
	c.render(w, r, sess, status, "keys", p)
}

func (c *Console) handleKeys(w http.ResponseWriter, r *http.Request, sess *session) {
	c.keysPage(w, r, sess, http.StatusOK, keysPage{})
}

func (c *Console) handleCreateKey(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	name, role := strings.TrimSpace(r.PostFormValue("name")), r.PostFormValue("role")
	a := c.call(r, sess, http.MethodPost, apiPath("tenants", tenant, "keys"), adminapi.CreateKey{Name: name, Role: role})
	if !a.ok() {
		c.keysPage(w, r, sess, a.Status, keysPage{Error: a.Message, Name: name, Role: role})
		return
	}
	var k adminapi.Key
	if err := a.decode(&k); err != nil {
		c.renderError(w, r, sess, http.StatusInternalServerError, err.Error())
		return
	}
	// The secret waits in this process for the next keys page, which shows
	// it once; it is never put in a URL.
	c.sessions.setFlash(sess, fmt.Sprintf("API key %s created.", k.Name), &createdKey{Tenant: tenant, Name: k.Name, ID: k.ID, Secret: k.Secret})
	http.Redirect(w, r, Prefix+"tenants/"+url.PathEscape(tenant)+"/keys", http.StatusSeeOther)
}

// confirmAction is a page that asks before a change that cannot be undone;
// its form posts confirm=yes with the session's CSRF token.
type confirmAction struct {
	Title, Message, Button string
	// Action is the form's target, Cancel where Cancel leads.
	Action, Cancel string
	Error          string
}

// confirmed reports whether a destructive post carries its confirmation.
func confirmed(r *http.Request) bool { return r.PostFormValue("confirm") == "yes" }

// notConfirmedMessage is shown on a confirmation page reached by a post
// without its confirmation.
const notConfirmedMessage = "Nothing was changed: confirm with the button below."

// revokeConfirmation reads key id of tenant through the API (so a key the
// user may not see is refused as the API refuses it) and returns the page
// that asks before revoking it.
func (c *Console) revokeConfirmation(w http.ResponseWriter, r *http.Request, sess *session) (confirmAction, bool) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	var body struct{ Keys []adminapi.Key }
	if !c.get(w, r, sess, apiPath("tenants", tenant, "keys"), &body) {
		return confirmAction{}, false
	}
	for _, k := range body.Keys {
		if k.ID != id {
			continue
		}
		if k.RevokedAt != nil {
			c.renderError(w, r, sess, http.StatusConflict, fmt.Sprintf("API key %s is already revoked.", id))
			return confirmAction{}, false
		}
		name := k.Name
		if name == "" {
			name = id
		}
		keys := Prefix + "tenants/" + url.PathEscape(tenant) + "/keys"
		return confirmAction{
			Title: "Revoke API key " + name,
			Message: fmt.Sprintf("Revoking API key %s (%s, role %s) of tenant %s refuses every client that uses it, at once.",
				name, id, k.Role, tenant),
			Button: "Revoke key " + name, Action: keys + "/" + url.PathEscape(id) + "/revoke", Cancel: keys,
		}, true
	}
	c.renderError(w, r, sess, http.StatusNotFound, fmt.Sprintf("Tenant %s has no API key %s.", tenant, id))
	return confirmAction{}, false
}

func (c *Console) handleConfirmRevokeKey(w http.ResponseWriter, r *http.Request, sess *session) {
	if p, ok := c.revokeConfirmation(w, r, sess); ok {
		c.renderConfirm(w, r, sess, http.StatusOK, p)
	}
}

// unconfirmed answers a POST that lacks its confirmation with the page that
// asks for it again (400, nothing changed), and says whether it did.
// confirmation builds that page, or answers the request itself (false) when
// what it asks about cannot be read.
func (c *Console) unconfirmed(w http.ResponseWriter, r *http.Request, sess *session,
	confirmation func(http.ResponseWriter, *http.Request, *session) (confirmAction, bool)) bool {
	if confirmed(r) {
		return false
	}
	if p, ok := confirmation(w, r, sess); ok {
		p.Error = notConfirmedMessage
		c.renderConfirm(w, r, sess, http.StatusBadRequest, p)
	}
	return true
}

// renderConfirm shows a confirmation page, titled by what it asks.
func (c *Console) renderConfirm(w http.ResponseWriter, r *http.Request, sess *session, status int, p confirmAction) {
	c.render(w, r, sess, status, "confirm", p)
}

func (c *Console) handleRevokeKey(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	if c.unconfirmed(w, r, sess, c.revokeConfirmation) {
		return
	}
	if !c.change(w, r, sess, http.MethodDelete, apiPath("tenants", tenant, "keys", id), nil) {
		return
	}
	if !sess.caller.Operator {
		// Revoking the key this session signed in with ends it.
		if _, err := c.opts.API.AdminCaller(sess.secret); err != nil {
			c.sessions.end(sess)
			c.clearCookie(w, r)
			c.render(w, r, nil, http.StatusOK, "signin", signInPage{Message: "You revoked the key you signed in with, so you are signed out."})
			return
		}
	}
	c.redirect(w, r, sess, Prefix+"tenants/"+url.PathEscape(tenant)+"/keys", "API key revoked.")
}

// --- rules

type rulesPage struct {
	Rules []adminapi.Rule
	// DefaultFailureMode is what this instance applies to a rule stored
	// without a failure mode (--default-failure-mode).
	DefaultFailureMode sluice.FailureMode
}

// limitText says a limit in words, as sluice.Limit's String does for every
// algorithm ("orders: 2 at once, lease 30s"); a limit the API sent that
// does not read back (it never should) is shown by its fields.
func limitText(l adminapi.Limit) string {
	lim, err := l.ToLimit()
	if err != nil {
		return fmt.Sprintf("%s: %s", l.Name, l.Algorithm)
	}
	return lim.String()
}

// overridesPage is a rule's plans and overrides, with the form that
// creates or replaces one.
type overridesPage struct {
	Rule      adminapi.Rule
	Overrides []adminapi.Override
	Now       time.Time
	Form      overrideForm
}

// LimitNames are the names an override's limits may take: the rule's and
// its plans', each once, plans in name order.
func (p overridesPage) LimitNames() []string {
	var names []string
	add := func(ls []adminapi.Limit) {
		for _, l := range ls {
			if !slices.Contains(names, l.Name) {
				names = append(names, l.Name)
			}
		}
	}
	add(p.Rule.Limits)
	plans := make([]string, 0, len(p.Rule.Plans))
	for name := range p.Rule.Plans {
		plans = append(plans, name)
	}
	sort.Strings(plans)
	for _, name := range plans {
		add(p.Rule.Plans[name])
	}
	return names
}

// overrideForm is the override form's input and the API's refusal of it.
type overrideForm struct {
	// Editing is set when the form replaces override Name (its name is
	// then fixed); otherwise a name already taken is refused.
	Editing        bool
	Name, Subjects string
	ExpiresAt      string
	Limits         []limitRow
	Errors         map[string]string
	FormError      string
}

// overridesPage renders the page of rule name with form f.
func (c *Console) overridesPage(w http.ResponseWriter, r *http.Request, sess *session, status int, f overrideForm) {
	tenant, name := r.PathValue("tenant"), r.PathValue("name")
	p := overridesPage{Form: f}
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules", name), &p.Rule) {
		return
	}
	var body adminapi.OverrideList
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules", name, "overrides"), &body) {
		return
	}
	p.Overrides, p.Now = body.Overrides, time.Now()
	if p.Form.Errors == nil {
		p.Form.Errors = map[string]string{}
	}
	p.Form.Limits = padRows(p.Form.Limits)
	c.render(w, r, sess, status, "overrides", p)
}

// handleOverrides shows a rule's plans and overrides, and the form for a
// new override.
func (c *Console) handleOverrides(w http.ResponseWriter, r *http.Request, sess *session) {
	c.overridesPage(w, r, sess, http.StatusOK, overrideForm{})
}

// hiddenOverrideFieldsMessage refuses to replace an override whose limits
// hold what the form has no field for.
const hiddenOverrideFieldsMessage = "This override has a credits limit or a calendar window in a time zone, which this form cannot show: " +
	"saving it here would change them. Change it through the admin API, sluice override set or a catalog file."

// handleEditOverride shows the page with the form filled with an override,
// to replace it.
func (c *Console) handleEditOverride(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, rule, name := r.PathValue("tenant"), r.PathValue("name"), r.PathValue("override")
	var o adminapi.Override
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules", rule, "overrides", name), &o) {
		return
	}
	f := overrideForm{Editing: true, Name: o.Name, Subjects: strings.Join(o.Subjects, "\n"), Limits: limitRowsOf(o.Limits)}
	if o.ExpiresAt != nil {
		f.ExpiresAt = o.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if hasHiddenFields(o.Limits) {
		f.FormError = hiddenOverrideFieldsMessage
	}
	c.overridesPage(w, r, sess, http.StatusOK, f)
}

// splitSubjects reads the subjects field: values and prefix* patterns
// separated by commas or line breaks.
func splitSubjects(s string) []string {
	out := []string{}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// expiryLayouts are the times without an offset the expiry field reads as
// UTC: what a datetime-local input sends, and the same with a space.
var expiryLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05"}

// expiryOf spells the expiry field for the API: a time without an offset
// is read as UTC; anything else goes as typed, for the API to judge.
func expiryOf(s string) string {
	for _, layout := range expiryLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.Format(time.RFC3339)
		}
	}
	return s
}

func (c *Console) handleSaveOverride(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, rule := r.PathValue("tenant"), r.PathValue("name")
	f := overrideForm{Editing: r.PostFormValue("editing") == "true", Name: strings.TrimSpace(r.PostFormValue("override_name")),
		Subjects: r.PostFormValue("subjects"), ExpiresAt: strings.TrimSpace(r.PostFormValue("expires_at"))}
	var limits []map[string]any
	f.Limits, limits, f.Errors = readLimitRows(r)
	if len(f.Errors) > 0 {
		c.overridesPage(w, r, sess, http.StatusBadRequest, f)
		return
	}
	body := map[string]any{"subjects": splitSubjects(f.Subjects), "limits": limits}
	if f.ExpiresAt != "" {
		body["expires_at"] = expiryOf(f.ExpiresAt)
	}
	path := apiPath("tenants", tenant, "rules", rule, "overrides", f.Name)
	var a apiAnswer
	if f.Name == "" {
		// The name is part of the API's path: without one there is no call.
		a = apiAnswer{Status: http.StatusBadRequest, Message: "An override needs a name: lowercase letters, digits and dashes."}
	} else {
		switch cur := c.call(r, sess, http.MethodGet, path, nil); {
		case !f.Editing && cur.ok():
			// PUT replaces: a new override must not silently take an existing one's place.
			a = apiAnswer{Status: http.StatusConflict, Message: fmt.Sprintf("Rule %s already has an override named %s; edit it instead, or choose another name.", rule, f.Name)}
		case f.Editing && cur.ok() && overrideHasHiddenFields(cur):
			a = apiAnswer{Status: http.StatusConflict, Message: hiddenOverrideFieldsMessage}
		default:
			a = c.call(r, sess, http.MethodPut, path, body)
		}
	}
	if !a.ok() {
		switch field := overrideFieldOf(a.Message, f.Limits); field {
		case "":
			f.FormError = a.Message
		default:
			f.Errors[field] = a.Message
		}
		c.overridesPage(w, r, sess, a.Status, f)
		return
	}
	verb := "created"
	if a.Status == http.StatusOK {
		verb = "replaced"
	}
	c.redirect(w, r, sess, overridesURL(tenant, rule), fmt.Sprintf("Override %s of rule %s %s.", f.Name, rule, verb))
}

// overrideHasHiddenFields reports whether the override the API answered
// has a limit the form cannot show.
func overrideHasHiddenFields(a apiAnswer) bool {
	var o adminapi.Override
	return a.decode(&o) == nil && hasHiddenFields(o.Limits)
}

// overrideLimitInMessage finds the limit an override's error names.
var overrideLimitInMessage = regexp.MustCompile(`(?:no limit named|[Ll]imit) "([^"]*)"`)

// overrideFieldOf finds the field of the override form an API message is
// about; "" when it names none.
func overrideFieldOf(msg string, rows []limitRow) string {
	if f := namedLimitRow(overrideLimitInMessage, msg, rows); f != "" {
		return f
	}
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "expires_at"):
		return "expires_at"
	case strings.Contains(lower, "subject"):
		return "subjects"
	case strings.Contains(lower, "override name") || strings.Contains(lower, "needs a name"):
		return "override_name"
	case strings.Contains(lower, "limit"):
		return "limits"
	}
	return ""
}

func overridesURL(tenant, rule string) string {
	return Prefix + "tenants/" + url.PathEscape(tenant) + "/rules/" + url.PathEscape(rule) + "/overrides"
}

// deleteOverrideConfirmation reads the override through the API and
// returns the page that asks before deleting it.
func (c *Console) deleteOverrideConfirmation(w http.ResponseWriter, r *http.Request, sess *session) (confirmAction, bool) {
	tenant, rule, name := r.PathValue("tenant"), r.PathValue("name"), r.PathValue("override")
	var o adminapi.Override
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules", rule, "overrides", name), &o) {
		return confirmAction{}, false
	}
	back := overridesURL(tenant, rule)
	return confirmAction{
		Title: "Delete override " + name,
		Message: fmt.Sprintf("Deleting override %s of rule %s (subjects %s) gives its subjects their plan's or the rule's limits again, at once.",
			name, rule, strings.Join(o.Subjects, ", ")),
		Button: "Delete override " + name, Action: back + "/" + url.PathEscape(name) + "/delete", Cancel: back,
	}, true
}

func (c *Console) handleConfirmDeleteOverride(w http.ResponseWriter, r *http.Request, sess *session) {
	if p, ok := c.deleteOverrideConfirmation(w, r, sess); ok {
		c.renderConfirm(w, r, sess, http.StatusOK, p)
	}
}

func (c *Console) handleDeleteOverride(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, rule, name := r.PathValue("tenant"), r.PathValue("name"), r.PathValue("override")
	if c.unconfirmed(w, r, sess, c.deleteOverrideConfirmation) {
		return
	}
	if !c.change(w, r, sess, http.MethodDelete, apiPath("tenants", tenant, "rules", rule, "overrides", name), nil) {
		return
	}
	c.redirect(w, r, sess, overridesURL(tenant, rule), fmt.Sprintf("Override %s of rule %s deleted.", name, rule))
}

func (c *Console) handleRules(w http.ResponseWriter, r *http.Request, sess *session) {
	var body struct{ Rules []adminapi.Rule }
	if !c.get(w, r, sess, apiPath("tenants", r.PathValue("tenant"), "rules"), &body) {
		return
	}
	c.render(w, r, sess, http.StatusOK, "rules", rulesPage{Rules: body.Rules, DefaultFailureMode: c.opts.API.DefaultFailureMode()})
}

// limitRows is how many limits the rule form offers.
const limitRows = 3

type limitRow struct {
	Index                                   int
	Name, Algorithm, Amount, Refill, Window string
}

type ruleForm struct {
	Editing                  bool
	Name, Route, FailureMode string
	Shadow                   bool
	Limits                   []limitRow
	// Errors maps a field ("name", "route", "failure_mode", "limits",
	// "limit0"...) to the API's message about it; FormError is a message
	// that names no field.
	Errors    map[string]string
	FormError string
}

func (c *Console) handleRuleForm(w http.ResponseWriter, r *http.Request, sess *session) {
	f := ruleForm{Errors: map[string]string{}}
	if name := r.PathValue("name"); name != "" {
		var rule adminapi.Rule
		if !c.get(w, r, sess, apiPath("tenants", r.PathValue("tenant"), "rules", name), &rule) {
			return
		}
		f.Editing, f.Name, f.Route, f.FailureMode, f.Shadow = true, rule.Name, rule.Route, rule.FailureMode, rule.Shadow
		f.Limits = limitRowsOf(rule.Limits)
	}
	if f.Editing && c.storedRuleHasHiddenFields(r, sess, r.PathValue("tenant"), f.Name) {
		f.FormError = hiddenFieldsMessage
	}
	f.padLimits()
	c.render(w, r, sess, http.StatusOK, "rule-form", f)
}

// hiddenFieldsMessage refuses to save a rule whose limits hold what the form
// has no field for: saving would drop it.
const hiddenFieldsMessage = "This rule has a credits limit or a calendar window in a time zone, which this form cannot show: " +
	"saving it here would change them. Change it through the admin API or a catalog file (sluice apply)."

// storedRuleHasHiddenFields reports whether the stored rule has a limit
// the form cannot represent: a credits limit (its refill) or a calendar
// window's time zone.
func (c *Console) storedRuleHasHiddenFields(r *http.Request, sess *session, tenant, name string) bool {
	a := c.call(r, sess, http.MethodGet, apiPath("tenants", tenant, "rules", name), nil)
	var rule adminapi.Rule
	if !a.ok() || a.decode(&rule) != nil {
		return false
	}
	return hasHiddenFields(rule.Limits)
}

// hasHiddenFields reports whether a limit of ls holds what the limit rows
// have no field for: a credits limit (its refill) or a calendar window's
// time zone.
func hasHiddenFields(ls []adminapi.Limit) bool {
	for _, l := range ls {
		if l.Algorithm == string(sluice.AlgorithmCredits) || l.TimeZone != "" {
			return true
		}
	}
	return false
}

// limitRowsOf fills the form's limit rows with ls.
func limitRowsOf(ls []adminapi.Limit) []limitRow {
	var rows []limitRow
	for _, l := range ls {
		row := limitRow{Name: l.Name, Algorithm: l.Algorithm, Window: l.Window}
		if l.Algorithm == string(sluice.AlgorithmConcurrency) {
			row.Window = l.TTL // one field: a concurrency limit has no window
		}
		switch {
		case l.Capacity != nil:
			row.Amount = strconv.FormatInt(*l.Capacity, 10)
		case l.Limit != nil:
			row.Amount = strconv.FormatInt(*l.Limit, 10)
		}
		if l.RefillPerSecond != nil {
			row.Refill = strconv.FormatFloat(*l.RefillPerSecond, 'f', -1, 64)
		}
		rows = append(rows, row)
	}
	return rows
}

// padRows numbers rows and adds empty ones up to limitRows.
func padRows(rows []limitRow) []limitRow {
	for len(rows) < limitRows {
		rows = append(rows, limitRow{})
	}
	for i := range rows {
		rows[i].Index = i
	}
	return rows
}

func (f *ruleForm) padLimits() { f.Limits = padRows(f.Limits) }

// readLimitRows reads the limit rows of a posted form into the API's JSON
// limits; errs holds, by row ("limit0"...), what is not a number at all.
// Numbers go to the API as typed, so that it judges them.
func readLimitRows(r *http.Request) (rows []limitRow, limits []map[string]any, errs map[string]string) {
	limits, errs = []map[string]any{}, map[string]string{}
	for i := range limitRows {
		field := func(n string) string { return strings.TrimSpace(r.PostFormValue(fmt.Sprintf("%s%d", n, i))) }
		row := limitRow{Index: i, Name: field("limit_name"), Algorithm: field("algorithm"), Amount: field("amount"),
			Refill: field("refill"), Window: field("window")}
		rows = append(rows, row)
		if row.Algorithm == "" {
			continue
		}
		l := map[string]any{"name": row.Name, "algorithm": row.Algorithm}
		key := fmt.Sprintf("limit%d", i)
		amount, ok := jsonNumber(row.Amount)
		if !ok {
			errs[key] = fmt.Sprintf("Capacity or limit %q is not a number.", row.Amount)
			continue
		}
		if row.Algorithm == "token_bucket" {
			refill, ok := jsonNumber(row.Refill)
			if !ok {
				errs[key] = fmt.Sprintf("Refill per second %q is not a number.", row.Refill)
				continue
			}
			l["capacity"], l["refill_per_second"] = amount, refill
			if row.Window != "" {
				l["window"] = row.Window // the API says why it does not belong
			}
		} else if row.Algorithm == string(sluice.AlgorithmConcurrency) {
			l["limit"], l["ttl"] = amount, row.Window
			if row.Refill != "" {
				l["refill_per_second"], _ = jsonNumber(row.Refill) // the API says why it does not belong
			}
		} else {
			l["limit"], l["window"] = amount, row.Window
			if row.Refill != "" {
				l["refill_per_second"], _ = jsonNumber(row.Refill)
			}
		}
		limits = append(limits, l)
	}
	return rows, limits, errs
}

func (c *Console) handleSaveRule(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	f := ruleForm{
		Editing: r.PostFormValue("editing") == "true", Name: strings.TrimSpace(r.PostFormValue("name")),
		Route: strings.TrimSpace(r.PostFormValue("route")), FailureMode: r.PostFormValue("failure_mode"),
		Shadow: r.PostFormValue("shadow") == "on", Errors: map[string]string{},
	}
	body := map[string]any{"route": f.Route, "shadow": f.Shadow, "failure_mode": f.FailureMode}
	var limits []map[string]any
	f.Limits, limits, f.Errors = readLimitRows(r)
	body["limits"] = limits
	if len(f.Errors) > 0 {
		f.padLimits()
		c.render(w, r, sess, http.StatusBadRequest, "rule-form", f)
		return
	}
	var a apiAnswer
	switch {
	case f.Name == "":
		// The name is part of the API's path: without one there is no call.
		a = apiAnswer{Status: http.StatusBadRequest, Message: "A rule needs a name: lowercase letters, digits and dashes."}
	case f.Editing && c.storedRuleHasHiddenFields(r, sess, tenant, f.Name):
		a = apiAnswer{Status: http.StatusConflict, Message: hiddenFieldsMessage}
	case !f.Editing && c.call(r, sess, http.MethodGet, apiPath("tenants", tenant, "rules", f.Name), nil).ok():
		// PUT replaces: a new rule must not silently take an existing one's place.
		a = apiAnswer{Status: http.StatusConflict, Message: fmt.Sprintf("A rule named %s already exists; edit it instead, or choose another name.", f.Name)}
	default:
		if f.Editing {
			// The form edits limits, not plans: the rule's plans are kept
			// as they are, not dropped by the replace.
			if cur := c.call(r, sess, http.MethodGet, apiPath("tenants", tenant, "rules", f.Name), nil); cur.ok() {
				var rule adminapi.Rule
				if err := cur.decode(&rule); err == nil && len(rule.Plans) > 0 {
					body["plans"] = rule.Plans
				}
			}
		}
		a = c.call(r, sess, http.MethodPut, apiPath("tenants", tenant, "rules", f.Name), body)
	}
	if !a.ok() {
		field := fieldOf(a.Message, f.Limits)
		if field == "" {
			f.FormError = a.Message
		} else {
			f.Errors[field] = a.Message
		}
		f.padLimits()
		c.render(w, r, sess, a.Status, "rule-form", f)
		return
	}
	c.redirect(w, r, sess, Prefix+"tenants/"+url.PathEscape(tenant)+"/rules", fmt.Sprintf("Rule %s saved.", f.Name))
}

// jsonNumber reads s as a JSON number, unchanged, so the API sees what was
// typed ("" reads as absent).
func jsonNumber(s string) (any, bool) {
	if s == "" {
		return nil, true
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return nil, false
	}
	return json.Number(s), true
}

var limitNameInMessage = regexp.MustCompile(`^Limit "([^"]*)"`)

// namedLimitRow is the field of the limit row an API message names (the
// first submatch of named: a limit's name, or its algorithm for an unnamed
// row); "" when it names none of rows.
func namedLimitRow(named *regexp.Regexp, msg string, rows []limitRow) string {
	if m := named.FindStringSubmatch(msg); m != nil {
		for _, row := range rows {
			if row.Algorithm != "" && (row.Name == m[1] || row.Name == "" && row.Algorithm == m[1]) {
				return fmt.Sprintf("limit%d", row.Index)
			}
		}
	}
	return ""
}

// fieldOf finds the field an API message is about, so the form shows it
// beside that field; "" when it names none.
func fieldOf(msg string, rows []limitRow) string {
	if f := namedLimitRow(limitNameInMessage, msg, rows); f != "" {
		return f
	}
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "limit"):
		for _, row := range rows {
			if row.Algorithm != "" {
				return fmt.Sprintf("limit%d", row.Index)
			}
		}
		return "limits"
	case strings.Contains(lower, "route") || strings.Contains(lower, "pattern"):
		return "route"
	case strings.Contains(lower, "failure"):
		return "failure_mode"
	case strings.Contains(lower, "rule name") || strings.Contains(lower, "name"):
		return "name"
	}
	return ""
}

// deleteRuleConfirmation reads the rule through the API (so one the user
// may not see is refused as the API refuses it) and returns the page that
// asks before deleting it.
func (c *Console) deleteRuleConfirmation(w http.ResponseWriter, r *http.Request, sess *session) (confirmAction, bool) {
	tenant, name := r.PathValue("tenant"), r.PathValue("name")
	var rule adminapi.Rule
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules", name), &rule) {
		return confirmAction{}, false
	}
	rules := Prefix + "tenants/" + url.PathEscape(tenant) + "/rules"
	return confirmAction{
		Title: "Delete rule " + name,
		Message: fmt.Sprintf("Deleting rule %s of tenant %s (route %s) stops limiting the requests it matches: they are allowed, or fall to another rule, at once.",
			name, tenant, rule.Route),
		Button: "Delete rule " + name, Action: rules + "/" + url.PathEscape(name) + "/delete", Cancel: rules,
	}, true
}

func (c *Console) handleConfirmDeleteRule(w http.ResponseWriter, r *http.Request, sess *session) {
	if p, ok := c.deleteRuleConfirmation(w, r, sess); ok {
		c.renderConfirm(w, r, sess, http.StatusOK, p)
	}
}

func (c *Console) handleDeleteRule(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, name := r.PathValue("tenant"), r.PathValue("name")
	if c.unconfirmed(w, r, sess, c.deleteRuleConfirmation) {
		return
	}
	if !c.change(w, r, sess, http.MethodDelete, apiPath("tenants", tenant, "rules", name), nil) {
		return
	}
	c.live.Forget(func(l metrics.Labels) bool {
		return l.Source == metrics.SourceHTTP && l.Tenant == tenant && l.Rule == name
	})
	c.redirect(w, r, sess, Prefix+"tenants/"+url.PathEscape(tenant)+"/rules", fmt.Sprintf("Rule %s deleted.", name))
}

// --- subject inspector

type inspectPage struct {
	Rules         []string
	Rule, Subject string
	Result        *checkapi.Decision
	Error         string
}

func (c *Console) handleInspect(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	var rules struct{ Rules []adminapi.Rule }
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules"), &rules) {
		return
	}
	p := inspectPage{Rule: r.URL.Query().Get("rule"), Subject: r.URL.Query().Get("subject")}
	for _, rule := range rules.Rules {
		p.Rules = append(p.Rules, rule.Name)
	}
	sort.Strings(p.Rules)
	status := http.StatusOK
	if p.Rule != "" {
		a := c.call(r, sess, http.MethodGet, apiPath("tenants", tenant, "rules", p.Rule, "subjects", p.Subject), nil)
		var res checkapi.Decision
		switch {
		case !a.ok():
			p.Error, status = a.Message, a.Status
		case a.decode(&res) != nil:
			p.Error, status = "The console could not read the admin API's answer.", http.StatusInternalServerError
		default:
			p.Result = &res
		}
	}
	c.render(w, r, sess, status, "inspect", p)
}

func (c *Console) handleResetSubject(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant, rule, subject := r.PathValue("tenant"), r.PostFormValue("rule"), r.PostFormValue("subject")
	if !c.change(w, r, sess, http.MethodDelete, apiPath("tenants", tenant, "rules", rule, "subjects", subject), nil) {
		return
	}
	q := url.Values{"rule": {rule}, "subject": {subject}}
	c.redirect(w, r, sess, Prefix+"tenants/"+url.PathEscape(tenant)+"/inspect?"+q.Encode(),
		fmt.Sprintf("The counters of %q under %s were reset.", subject, rule))
}

// --- Envoy domains

type envoyPage struct {
	Enabled bool
	Domains []envoyDomain
}

type envoyDomain struct {
	Name, File, FailureMode string
	AllOrNothing            bool
	Rules                   []envoyRule
}

type envoyRule struct {
	Path, Name, Limit, FailureMode string
	Shadow, Unlimited              bool
}

func (c *Console) handleEnvoy(w http.ResponseWriter, r *http.Request, sess *session) {
	if !sess.caller.Operator {
		// Envoy domains belong to no tenant: the operator's alone.
		c.renderError(w, r, sess, http.StatusForbidden, "Only the operator may see the Envoy domains; a tenant key sees its own tenant only.")
		return
	}
	var p envoyPage
	if c.opts.EnvoyConfig != nil {
		if cfg := c.opts.EnvoyConfig(); cfg != nil {
			p.Enabled = true
			for _, name := range cfg.Domains() {
				d := cfg.Domain(name)
				dv := envoyDomain{Name: d.Name, File: d.File, FailureMode: string(d.FailureMode), AllOrNothing: d.AllOrNothing}
				for _, rule := range d.Rules() {
					dv.Rules = append(dv.Rules, envoyRule{Path: rule.Path, Name: rule.Name, Limit: rule.Limit.String(),
						FailureMode: string(rule.FailureMode), Shadow: rule.Shadow, Unlimited: rule.Unlimited})
				}
				p.Domains = append(p.Domains, dv)
			}
		}
	}
	c.render(w, r, sess, http.StatusOK, "envoy", p)
}

// --- audit log

// auditFilters are the query parameters of GET /v1/audit the audit page
// passes on; "before" pages.
var auditFilters = []string{"tenant", "actor", "action", "since", "until", "before"}

// auditPageSize is how many entries one audit page shows.
const auditPageSize = 50

type auditPage struct {
	Tenant, Actor, Action, Since, Until string
	Entries                             []auditEntry
	// Next links to the next (older) page, "" on the last.
	Next     string
	Filtered bool
	Error    string
}

type auditEntry struct {
	Time                  time.Time
	Actor, Action, Target string
	Tenant                string
	// Before and After are the thing changed, indented JSON ("" where it
	// did not exist).
	Before, After string
}

func (c *Console) handleAudit(w http.ResponseWriter, r *http.Request, sess *session) {
	in := r.URL.Query()
	p := auditPage{Tenant: in.Get("tenant"), Actor: in.Get("actor"), Action: in.Get("action"),
		Since: in.Get("since"), Until: in.Get("until")}
	q := url.Values{}
	for _, name := range auditFilters {
		if v := strings.TrimSpace(in.Get(name)); v != "" {
			q.Set(name, v)
			p.Filtered = p.Filtered || name != "before"
		}
	}
	// The API scopes a tenant key to its own tenant, and refuses another.
	ask := url.Values{"limit": {strconv.Itoa(auditPageSize)}}
	for name, v := range q {
		ask[name] = v
	}
	a := c.call(r, sess, http.MethodGet, "/v1/audit?"+ask.Encode(), nil)
	if !a.ok() {
		if a.Status != http.StatusBadRequest {
			c.failed(w, r, sess, a)
			return
		}
		p.Error = a.Message
		c.render(w, r, sess, a.Status, "audit", p)
		return
	}
	var body struct {
		Entries []struct {
			Time                  time.Time
			Actor, Action, Target string
			Tenant                *string
			Before, After         json.RawMessage
		}
		NextBefore *int64 `json:"next_before"`
	}
	if err := a.decode(&body); err != nil {
		c.renderError(w, r, sess, http.StatusInternalServerError, err.Error())
		return
	}
	for _, e := range body.Entries {
		out := auditEntry{Time: e.Time, Actor: e.Actor, Action: e.Action, Target: e.Target,
			Before: indentJSON(e.Before), After: indentJSON(e.After)}
		if e.Tenant != nil {
			out.Tenant = *e.Tenant
		}
		p.Entries = append(p.Entries, out)
	}
	if body.NextBefore != nil {
		q.Set("before", strconv.FormatInt(*body.NextBefore, 10))
		p.Next = Prefix + "audit?" + q.Encode()
	}
	c.render(w, r, sess, http.StatusOK, "audit", p)
}

// indentJSON lays out a JSON document for reading; "" for null or none.
func indentJSON(doc json.RawMessage) string {
	if len(doc) == 0 || string(doc) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, doc, "", "  ") != nil {
		return string(doc)
	}
	return b.String()
}
