package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// MaxRequestSubjectBytes bounds the subject a request to this API carries (a
// check's, or one in an admin path): far below sluice.MaxSubjectBytes, what
// a store accepts from any face, since this one faces the network.
const MaxRequestSubjectBytes = 1024

// credential returns the secret the caller presented: X-API-Key, else an
// Authorization Bearer token.
func credential(r *http.Request) string {
	// Canonical keys, read directly: Header.Get would canonicalise
	// "X-API-Key" (an allocation) on every check.
	if k := firstValue(r.Header, "X-Api-Key"); k != "" {
		return strings.TrimSpace(k)
	}
	auth := firstValue(r.Header, "Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

func firstValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// presentedSecret is the credential a request presented and its SHA-256,
// hashed once: the operator-token comparison and the key lookup share it.
type presentedSecret struct {
	text string
	sum  [sha256.Size]byte
}

// presented returns the request's credential (see credential), hashed.
func presented(r *http.Request) presentedSecret {
	p := presentedSecret{text: credential(r)}
	if p.text != "" {
		var buf [128]byte // usual-sized secrets hash without an allocation
		p.sum = sha256.Sum256(append(buf[:0], p.text...))
	}
	return p
}

// isAdminToken reports whether secret is the operator token, comparing
// hashes in constant time.
func isAdminToken(snap *sluice.Snapshot, secret presentedSecret) bool {
	if len(snap.AdminTokenHash) != sha256.Size || secret.text == "" {
		return false
	}
	return subtle.ConstantTimeCompare(secret.sum[:], snap.AdminTokenHash) == 1
}

var (
	errMissingKey = &apiError{http.StatusUnauthorized, "missing_api_key",
		"An API key is required: send it in the X-API-Key header or as Authorization: Bearer <key>."}
	errUnknownKey = &apiError{http.StatusUnauthorized, "invalid_api_key",
		"The API key is unknown or has been revoked."}
	errSuspended = &apiError{http.StatusForbidden, "tenant_suspended",
		"The tenant of this API key is suspended."}
)

// tenantKey authenticates a tenant API key against the snapshot. Keys are
// looked up by the SHA-256 of the presented secret, so the lookup's timing
// tells nothing about the secret.
func tenantKey(snap *sluice.Snapshot, secret presentedSecret) (sluice.KeyGrant, *apiError) {
	if secret.text == "" {
		return sluice.KeyGrant{}, errMissingKey
	}
	grant, ok := snap.KeyOfHash(secret.sum)
	if !ok {
		return sluice.KeyGrant{}, errUnknownKey
	}
	tenant, ok := snap.Tenants[grant.Tenant]
	if !ok {
		return sluice.KeyGrant{}, errUnknownKey
	}
	if tenant.Status != sluice.TenantActive {
		return sluice.KeyGrant{}, errSuspended
	}
	return grant, nil
}

// checkKey authenticates the tenant API key of a check (or of a hold
// operation), which must have the check role.
func checkKey(snap *sluice.Snapshot, r *http.Request) (sluice.KeyGrant, *apiError) {
	secret := presented(r)
	if isAdminToken(snap, secret) {
		return sluice.KeyGrant{}, &apiError{http.StatusForbidden, "wrong_role",
			"The operator token manages the catalog; checks need a tenant API key with the check role."}
	}
	grant, aerr := tenantKey(snap, secret)
	if aerr != nil {
		return grant, aerr
	}
	if grant.Role != sluice.RoleCheck {
		return grant, &apiError{http.StatusForbidden, "wrong_role",
			fmt.Sprintf("This API key has the %s role; checks and holds need a key with the check role.", grant.Role)}
	}
	return grant, nil
}

func (a *API) handleCheck(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	st := a.state.Load()
	grant, aerr := checkKey(st.snap, r)
	if aerr != nil {
		if aerr.status == http.StatusUnauthorized {
			a.authLog.record(r, "check", aerr.code)
		}
		a.fail(w, aerr)
		return
	}
	bp := getCheckBuffer()
	req, body, aerr := readCheckRequest(w, r, *bp)
	*bp = body
	putCheckBuffer(bp) // the request's strings are copies
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	if aerr := validateCheck(req); aerr != nil {
		a.fail(w, aerr)
		return
	}
	cost := req.CostOrDefault()

	matched, ok := st.snap.Match(grant.Tenant, req.Route)
	if !ok {
		// Limiting is opt-in: no rule, no store call.
		st.scopes[grant.Tenant].NoRule(start)
		writeDecision(w, http.StatusOK, "", sluice.Decision{Allowed: true}, false, choice{})
		return
	}
	rule := st.rules[ruleID{grant.Tenant, matched.Name}]
	if rule == nil { // cannot happen: rules is built from the same snapshot
		a.fail(w, &apiError{http.StatusServiceUnavailable, "catalog_reloading", "The rule set is being reloaded; retry shortly."})
		return
	}
	res, err := a.engine.Check(r.Context(), check.Query{Rule: rule.check, Subject: req.Subject, Cost: cost, Reserve: req.Reserve, Plan: req.Plan, Start: start})
	if err != nil {
		a.failCheck(w, r, grant.Tenant, rule.Name, err)
		return
	}
	d := res.Decision // the answer: a shadow rule's deny is already an allow
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusTooManyRequests
	}
	ratelimitheader.SetWithPolicy(w.Header(), rule.Name, rule.policyFor(res.Plan, res.Override), d)
	if !d.Allowed && d.RetryAfter > 0 && w.Header().Get("Retry-After") == "" {
		// A deny without per-limit figures (none of ours): still say when.
		w.Header().Set("Retry-After", fmt.Sprint(ratelimitheader.RetryAfterSeconds(d.RetryAfter)))
	}
	setChoiceHeaders(w.Header(), res.Plan, res.Override)
	writeDecision(w, status, rule.Name, d, rule.Shadow, choice{res.Plan, res.Override})
}

// The headers that name the plan and the override a check was decided
// under, sent only when one applied.
const (
	planHeader     = "X-Ratelimit-Plan"
	overrideHeader = "X-Ratelimit-Override"
)

func setChoiceHeaders(h http.Header, plan, override string) {
	if plan != "" {
		h[planHeader] = []string{plan}
	}
	if override != "" {
		h[overrideHeader] = []string{override}
	}
}

// failCheck answers a check the engine could not decide.
func (a *API) failCheck(w http.ResponseWriter, r *http.Request, tenant, rule string, err error) {
	a.failEngine(w, r, err, errRuleFailsClosed, "check failed", "tenant", tenant, "rule", rule)
}

// failEngine answers a call the engine could not serve, through errorFor.
// The store being unavailable, or an error errorFor does not know (which
// only the store call can have made, and is logged as logMsg with logArgs),
// answers unavailable: 503, with the face's own sentence.
func (a *API) failEngine(w http.ResponseWriter, r *http.Request, err error, unavailable *apiError, logMsg string, logArgs ...any) {
	e := errorFor(err)
	switch e {
	case errInternal:
		if r.Context().Err() == nil {
			a.log.Error(logMsg, append(logArgs, "error", err)...)
		}
		e = unavailable
	case errStoreUnavailable:
		e = unavailable
	default:
		if e.code == "catalog_unavailable" { // a network error of the store call
			e = unavailable
		}
	}
	a.fail(w, e)
}

var errRuleFailsClosed = &apiError{http.StatusServiceUnavailable, "store_unavailable",
	"The rate-limit store is unavailable and this rule fails closed; retry shortly."}

// validateCheck checks the fields of a check request that no rule is needed
// for.
func validateCheck(req checkapi.Request) *apiError {
	switch {
	case req.Route == "":
		return badRequest("Field \"route\" is required: the path of the request being checked, like /api/orders/17.")
	case len(req.Route) > sluice.MaxRouteBytes:
		return badRequest("Field \"route\" is %d bytes long; at most %d are allowed.", len(req.Route), sluice.MaxRouteBytes)
	case req.Route[0] != '/':
		// Rule patterns are paths: a route without its leading slash
		// would match no rule and pass unlimited, hiding a client bug.
		return badRequest("Field \"route\" must be a path starting with '/', like /api/orders/17; got %q.", req.Route)
	case len(req.Subject) > MaxRequestSubjectBytes:
		return badRequest("Field \"subject\" is %d bytes long; at most %d are allowed.", len(req.Subject), MaxRequestSubjectBytes)
	case req.Cost != nil && *req.Cost < 0:
		return badRequest("Field \"cost\" must not be negative, got %d.", *req.Cost)
	case len(req.Plan) > 64:
		return badRequest("Field \"plan\" is %d bytes long; plan names are at most 64.", len(req.Plan))
	}
	return nil
}

// fail writes an error answer. Every 503 says when to retry: Retry-After 1
// unless the caller set another.
func (a *API) fail(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, e.status, e.code, e.message)
}
