// Package httpapi is the JSON API of the rate-limit service: POST /v1/check,
// the admin API over tenants, keys and rules, and the health endpoints.
//
// The check path never touches the database. The API serves from an
// in-memory snapshot of the catalog, swapped atomically whenever the
// catalog's Watch reports a change (and after every change made through this
// API, so a caller reads its own writes at once). Counters are keyed by the
// matched rule and the subject, never by the raw route.
package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// Options configure an API.
type Options struct {
	Catalog sluice.Catalog
	// Engine decides checks: deny cache, guard, store, shadow and metrics.
	Engine *check.Engine
	// Metrics, if set, is where series of deleted rules are removed from;
	// pass the Engine's.
	Metrics *metrics.Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// DefaultFailureMode applies to rules stored without one, and is given
	// to rules created without one (default closed).
	DefaultFailureMode sluice.FailureMode
	// StorePing reports whether the rate-limit store answers, for /readyz;
	// nil means always ready (an in-process store).
	StorePing func(context.Context) error
	// AdminTimeout bounds each admin call, catalog reads and writes
	// included (default DefaultAdminTimeout). Past it the call answers 503
	// catalog_unavailable. Keep it below the server's write timeout, or a
	// slow call ends in an empty reply.
	AdminTimeout time.Duration
	// AdminWriteLimit limits the admin calls that change something
	// (everything but GET) made with one tenant's admin keys, checked by
	// Engine (default DefaultAdminWriteLimit); past it they answer 429
	// rate_limited. The operator is never limited.
	AdminWriteLimit sluice.Limit
	// NoAdminWriteLimit turns that limit off.
	NoAdminWriteLimit bool
	// WriteProbeInterval is how often Run asks the catalog whether it
	// takes writes, for /readyz (default DefaultWriteProbeInterval).
	WriteProbeInterval time.Duration
	// Clock is what an override's expires_at is judged against when it is
	// written (default time.Now); give the Engine the same.
	Clock func() time.Time
}

// DefaultAdminTimeout is the admin deadline when Options.AdminTimeout is 0.
const DefaultAdminTimeout = 5 * time.Second

// API serves the check and admin API. Create it with New, start following
// catalog changes with Run, and mount it with Register.
type API struct {
	catalog      sluice.Catalog
	engine       *check.Engine
	metrics      *metrics.Metrics
	log          *slog.Logger
	defaultMode  sluice.FailureMode
	storePing    func(context.Context) error
	adminTimeout time.Duration

	state atomic.Pointer[state]
	// confirmedAt is when the served snapshot was last known to be the
	// catalog's current one (unix nanoseconds), for /readyz.
	confirmedAt atomic.Int64
	ready       readyCache
	draining    atomic.Bool
	// reloadMu serialises snapshot reloads so an older read never replaces
	// a newer one.
	reloadMu sync.Mutex
	authLog  *authFailureLog
	// writeLimit limits tenants' admin writes; nil: no limit.
	writeLimit *check.Rule
	// writes is what the catalog's write probe last found (writesUnknown,
	// writesOK, writesReadOnly), every writeProbeInterval.
	writes             atomic.Int32
	writeProbeInterval time.Duration
	now                func() time.Time
}

// state is one immutable view of the catalog for the check path.
type state struct {
	snap *sluice.Snapshot
	// rules holds each rule's compiled form, with an identity that changes
	// exactly when the rule does (for the deny cache).
	rules map[ruleID]*compiledRule
	// scopes count each tenant's checks that match no rule.
	scopes map[string]*check.Scope
}

type ruleID struct{ tenant, name string }

// compiledRule is a rule as the check path uses it.
type compiledRule struct {
	sluice.Rule
	// check is the rule as the engine checks it: failure mode with the
	// server default applied, counter namespace (see sluice.Tenant.CounterNamespace).
	check *check.Rule
	// policyHeader is the rule's RateLimit-Policy value, the same for
	// every answer under its own limits; planPolicy that of each plan.
	// Under an override it is computed from the decision.
	policyHeader string
	planPolicy   map[string]string
}

// policyFor is the RateLimit-Policy value of a check decided under plan and
// override ("" for none), or "" to compute it from the decision.
func (c *compiledRule) policyFor(plan, override string) string {
	switch {
	case override != "":
		return ""
	case plan != "":
		return c.planPolicy[plan]
	}
	return c.policyHeader
}

// compileRule builds the check path's form of r.
func (a *API) compileRule(tenant, ns string, mode sluice.FailureMode, r sluice.Rule) *compiledRule {
	cr := &compiledRule{Rule: r, policyHeader: ratelimitheader.Policy(r.Name, r.Limits)}
	if len(r.Plans) > 0 {
		cr.planPolicy = make(map[string]string, len(r.Plans))
		for name, ls := range r.Plans {
			cr.planPolicy[name] = ratelimitheader.Policy(r.Name, ls)
		}
	}
	var overrides *sluice.OverrideMatcher
	if len(r.Overrides) > 0 {
		overrides = sluice.NewOverrideMatcher(r.Overrides)
	}
	cr.check = a.engine.NewRule(metrics.Labels{Source: metrics.SourceHTTP, Tenant: tenant, Rule: r.Name},
		check.Rule{Namespace: ns, Name: r.Name, Limits: r.Limits, Plans: r.Plans, Overrides: overrides, Mode: mode, Shadow: r.Shadow})
	return cr
}

// New returns an API serving the catalog's current snapshot.
func New(ctx context.Context, opts Options) (*API, error) {
	if opts.Catalog == nil || opts.Engine == nil {
		return nil, errors.New("httpapi: a catalog and a check engine are required")
	}
	a := &API{
		catalog:      opts.Catalog,
		engine:       opts.Engine,
		metrics:      opts.Metrics,
		log:          opts.Logger,
		defaultMode:  opts.DefaultFailureMode,
		storePing:    opts.StorePing,
		adminTimeout: opts.AdminTimeout,

		writeProbeInterval: cmp.Or(opts.WriteProbeInterval, DefaultWriteProbeInterval),
		now:                opts.Clock,
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.adminTimeout <= 0 {
		a.adminTimeout = DefaultAdminTimeout
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.authLog = newAuthFailureLog(a.log)
	if !opts.NoAdminWriteLimit {
		l := opts.AdminWriteLimit
		if l == (sluice.Limit{}) {
			l = DefaultAdminWriteLimit
		}
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("admin write limit: %w", err)
		}
		a.writeLimit = newWriteLimit(l)
	}
	if a.defaultMode == "" {
		a.defaultMode = sluice.FailClosed
	}
	if !a.defaultMode.Valid() {
		return nil, fmt.Errorf("unknown default failure mode %q (want closed, open or local)", a.defaultMode)
	}
	if err := a.reload(ctx); err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	a.metrics.SnapshotAge(func() time.Duration { return time.Since(time.Unix(0, a.confirmedAt.Load())) })
	return a, nil
}

// snapshotReloadTimeout bounds one catalog snapshot read.
const snapshotReloadTimeout = 5 * time.Second

// Run follows catalog changes until ctx ends: it reloads the snapshot when
// the catalog version moves and drops deny-cache entries of reset subjects,
// and probes whether the catalog takes writes (for /readyz). It returns nil
// when ctx ends, or an error if the catalog cannot be watched.
func (a *API) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	probed := make(chan struct{})
	go func() { defer close(probed); a.probeWrites(ctx) }()
	defer func() { <-probed }()
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default: // one pending signal covers any number of changes
		}
	}
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			// A reload that hangs (a connection gone silent after a
			// failover) must not stall every later change: give up and
			// retry.
			reloadCtx, cancelReload := context.WithTimeout(ctx, snapshotReloadTimeout)
			err := a.reload(reloadCtx)
			cancelReload()
			if err != nil && ctx.Err() == nil {
				a.log.Warn("catalog snapshot reload failed; serving the previous one", "error", err)
				// The change is still unseen: try again soon.
				time.AfterFunc(200*time.Millisecond, signal)
			}
		}
	}()
	err := a.catalog.Watch(ctx, func(ev sluice.Event) {
		if ev.Reset != nil {
			a.forgetSubject(ev.Reset.Tenant, ev.Reset.Rule, ev.Reset.Subject)
		}
		if ev.Version != a.state.Load().snap.Version {
			// Reload outside the callback, which must return quickly.
			signal()
		} else {
			a.confirm()
		}
	})
	cancel()
	<-reloaded
	if err != nil {
		return fmt.Errorf("watch the catalog: %w", err)
	}
	return nil
}

// reload reads a snapshot and swaps it in if it is newer than the one served.
func (a *API) reload(ctx context.Context) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	snap, err := a.catalog.Snapshot(ctx)
	if err != nil {
		return err
	}
	old := a.state.Load()
	if old != nil && snap.Version < old.snap.Version {
		a.confirm() // what is served is newer still
		return nil
	}
	a.state.Store(a.compile(snap, old))
	a.confirm()
	return nil
}

// compile builds the check path's view of snap, keeping the identity of
// every rule that did not change since old, and removes the metric series of
// rules and tenants that are gone.
func (a *API) compile(snap *sluice.Snapshot, old *state) *state {
	st := &state{snap: snap, rules: make(map[ruleID]*compiledRule), scopes: make(map[string]*check.Scope)}
	for tenant := range snap.Tenants {
		if old != nil && old.scopes[tenant] != nil {
			st.scopes[tenant] = old.scopes[tenant]
			continue
		}
		st.scopes[tenant] = a.engine.NewScope(metrics.Labels{Source: metrics.SourceHTTP, Tenant: tenant})
	}
	for tenant, table := range snap.Routes {
		for _, r := range table.Rules() {
			id := ruleID{tenant, r.Name}
			mode := r.FailureMode
			if mode == "" {
				mode = a.defaultMode
			}
			ns := snap.Tenants[tenant].CounterNamespace()
			if old != nil {
				// A tenant deleted and created again gets a new namespace,
				// so even an identical rule is a new one (fresh deny cache).
				if prev, ok := old.rules[id]; ok && sameRule(prev.Rule, r) && prev.check.Mode == mode && prev.check.Namespace == ns {
					st.rules[id] = prev
					continue
				}
			}
			st.rules[id] = a.compileRule(tenant, ns, mode, r)
		}
	}
	if old != nil {
		for tenant := range old.scopes {
			if _, ok := st.scopes[tenant]; !ok {
				a.metrics.DropRule(metrics.SourceHTTP, tenant, "", "")
			}
		}
		for id := range old.rules {
			if _, ok := st.rules[id]; !ok {
				a.metrics.DropRule(metrics.SourceHTTP, id.tenant, "", id.name)
			}
		}
	}
	return st
}

// sameRule reports whether two versions of a rule decide every check alike:
// an override or a plan changed is a new rule, so the subjects' cached
// denies (remembered under the old limits) are dropped.
func sameRule(a, b sluice.Rule) bool {
	return a.Route == b.Route && a.FailureMode == b.FailureMode && a.Shadow == b.Shadow &&
		slices.Equal(a.Limits, b.Limits) && samePlans(a.Plans, b.Plans) &&
		slices.EqualFunc(a.Overrides, b.Overrides, sameOverride)
}

func samePlans(a, b sluice.Plans) bool {
	if len(a) != len(b) {
		return false
	}
	for name, ls := range a {
		if other, ok := b[name]; !ok || !slices.Equal(ls, other) {
			return false
		}
	}
	return true
}

func sameOverride(a, b sluice.Override) bool {
	return a.Name == b.Name && a.ExpiresAt.Equal(b.ExpiresAt) && slices.Equal(a.Subjects, b.Subjects) && slices.Equal(a.Limits, b.Limits)
}

// forgetSubject drops the deny-cache entry of a subject of a tenant whose
// counters were reset.
func (a *API) forgetSubject(tenant, rule, subject string) {
	t, ok := a.state.Load().snap.Tenants[tenant]
	if !ok {
		return // no tenant, no counters the cache could hold
	}
	a.engine.ForgetSubject(t.CounterNamespace(), rule, subject)
}

// Register mounts the API's routes on mux.
func (a *API) Register(mux *http.ServeMux) {
	for _, rt := range a.routes() {
		mux.HandleFunc(rt.pattern, rt.handler)
	}
}

// route is one endpoint of the API.
type route struct {
	pattern string // a ServeMux pattern: "METHOD /path/{param}"
	handler http.HandlerFunc
}

// routes lists every endpoint Register mounts. It is the one list: the test
// of openapi.json compares the document's operations with it.
func (a *API) routes() []route {
	return []route{
		{"POST /v1/check", a.handleCheck},
		{"POST /v1/holds/{id}/settle", a.handleSettleHold},
		{"DELETE /v1/holds/{id}", a.handleReleaseHold},
		{"POST /v1/holds/{id}/extend", a.handleExtendHold},
		{"POST /v1/leases", a.handleTakeLease},
		{"POST /v1/leases/{id}/renew", a.handleRenewLease},
		{"DELETE /v1/leases/{id}", a.handleReturnLease},

		{"POST /v1/tenants", a.handleCreateTenant},
		{"GET /v1/tenants", a.handleListTenants},
		{"GET /v1/tenants/{tenant}", a.handleGetTenant},
		{"PATCH /v1/tenants/{tenant}", a.handlePatchTenant},
		{"DELETE /v1/tenants/{tenant}", a.handleDeleteTenant},

		{"POST /v1/tenants/{tenant}/keys", a.handleCreateKey},
		{"GET /v1/tenants/{tenant}/keys", a.handleListKeys},
		{"DELETE /v1/tenants/{tenant}/keys/{id}", a.handleRevokeKey},

		{"PUT /v1/tenants/{tenant}/rules/{name}", a.handlePutRule},
		{"GET /v1/tenants/{tenant}/rules", a.handleListRules},
		{"GET /v1/tenants/{tenant}/rules/{name}", a.handleGetRule},
		{"DELETE /v1/tenants/{tenant}/rules/{name}", a.handleDeleteRule},
		{"GET /v1/tenants/{tenant}/rules/{name}/overrides", a.handleListOverrides},
		{"PUT /v1/tenants/{tenant}/rules/{name}/overrides/{override}", a.handlePutOverride},
		{"GET /v1/tenants/{tenant}/rules/{name}/overrides/{override}", a.handleGetOverride},
		{"DELETE /v1/tenants/{tenant}/rules/{name}/overrides/{override}", a.handleDeleteOverride},
		{"GET /v1/tenants/{tenant}/rules/{name}/subjects/{subject...}", a.handlePeekSubject},

		{"GET /v1/audit", a.handleAudit},
		{"GET /v1/tenants/{tenant}/usage", a.handleUsage},
		{"GET /v1/tenants/{tenant}/usage/top", a.handleTopSubjects},
		{"DELETE /v1/tenants/{tenant}/rules/{name}/subjects/{subject...}", a.handleResetSubject},
		{"POST /v1/tenants/{tenant}/rules/{name}/subjects/{subject...}", a.handleTopUpCredits},

		{"GET /healthz", a.handleHealth},
		{"GET /readyz", a.handleReady},
		{"GET /v1/openapi.json", handleOpenAPI},
	}
}

// Handler returns a handler serving only the API's routes.
func (a *API) Handler() http.Handler {
	h := a.handler()
	if testHandlerHook != nil {
		h = testHandlerHook(a, h)
	}
	return h
}

func (a *API) handler() http.Handler {
	mux := http.NewServeMux()
	a.Register(mux)
	return WithJSONErrors(mux)
}

// testHandlerHook, set only by this package's tests, wraps every Handler so
// that each request and answer of the test suites is checked against
// openapi.json. Always nil in a build that is not a test.
var testHandlerHook func(*API, http.Handler) http.Handler

func (a *API) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// WithJSONErrors answers what mux has no route for (404) or no method for
// (405) with the API's JSON error body instead of plain text.
func WithJSONErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
				fmt.Sprintf("%s does not accept %s; it accepts %s.", r.URL.Path, r.Method, probe.header.Get("Allow")))
		case http.StatusNotFound:
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("There is no endpoint %s.", r.URL.Path))
		default: // a redirect or another answer of the mux's own: pass it on
			mux.ServeHTTP(w, r)
		}
	})
}

// statusProbe records what the mux's fallback handler would answer.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
func (p *statusProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}
