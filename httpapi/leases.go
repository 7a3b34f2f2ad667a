package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// Quota leases for remote holders (DESIGN.md "Leases", docs/service.md):
//
//	POST   /v1/leases             {"route", "subject", "holder", "want", "ttl_ms"}
//	POST   /v1/leases/{id}/renew  {"unused", "holder", "want", "ttl_ms"} (and optionally "route", "subject")
//	DELETE /v1/leases/{id}?unused=N
//
// with a check-role key; a lease is bound to the key's tenant (another
// tenant's lease id is unknown to it). A take or renew answers as a check
// of cost 1 does (200 allowed, 429 denied with Retry-After, 503 when the
// store is unavailable and the rule fails closed), with "lease": the units
// granted, or null. Only a rule whose every limit says "lease": "auto", with
// no plans, overrides or shadow, leases: others are 409 rule_not_leased.

var (
	errLeasesUnavailable = &apiError{http.StatusServiceUnavailable, "store_unavailable",
		"The rate-limit store is unavailable, and leases live only there; retry shortly."}
	errLeaseNotFound = &apiError{http.StatusNotFound, "lease_not_found",
		"No lease of this tenant has this id: it was never granted to this tenant, or expired a while ago. Take a new one with POST /v1/leases."}
)

func (a *API) handleTakeLease(w http.ResponseWriter, r *http.Request) {
	st := a.state.Load()
	grant, aerr := checkKey(st.snap, r)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	var body checkapi.LeaseRequest
	if aerr := decodeBody(w, r, &body); aerr != nil {
		a.fail(w, aerr)
		return
	}
	if aerr := validateCheck(checkapi.Request{Route: body.Route, Subject: body.Subject}); aerr != nil {
		a.fail(w, aerr)
		return
	}
	q, aerr := leaseQuery(body.Holder, body.Want, body.TTLMs)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	rule, aerr := leaseRule(st, grant.Tenant, body.Route)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	q.Rule, q.Subject = rule.check, body.Subject
	ans, err := a.engine.Lease(r.Context(), q)
	if err != nil {
		a.failLease(w, r, grant.Tenant, err)
		return
	}
	writeLeaseAnswer(w, rule, ans, "")
}

func (a *API) handleRenewLease(w http.ResponseWriter, r *http.Request) {
	st := a.state.Load()
	grant, aerr := checkKey(st.snap, r)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	var body checkapi.RenewRequest
	if aerr := decodeBody(w, r, &body); aerr != nil {
		a.fail(w, aerr)
		return
	}
	if body.Unused == nil {
		a.fail(w, badRequest("Field \"unused\" is required: how many of the lease's units were not admitted (0 when all were)."))
		return
	}
	q, aerr := leaseQuery(body.Holder, body.Want, body.TTLMs)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	var rule *compiledRule
	if body.Route != "" {
		// The holder says which route and subject its lease was of: one
		// store call (the engine checks the lease is of them). Without
		// them the id names the rule and subject, and the engine finds
		// the rule by name: one store call too (two for an id of an
		// older server, which names neither).
		if aerr := validateCheck(checkapi.Request{Route: body.Route, Subject: body.Subject}); aerr != nil {
			a.fail(w, aerr)
			return
		}
		if rule, aerr = leaseRule(st, grant.Tenant, body.Route); aerr != nil {
			a.fail(w, aerr)
			return
		}
		q.Rule, q.Subject = rule.check, body.Subject
	} else if body.Subject != "" {
		a.fail(w, badRequest("Field \"subject\" of a renew needs \"route\" too (both the old lease's), or neither."))
		return
	}
	id := r.PathValue("id")
	ns := st.snap.Tenants[grant.Tenant].CounterNamespace()
	ret, ans, err := a.engine.RenewLease(r.Context(), ns, id, *body.Unused, func(name string) *check.Rule {
		if rule = st.rules[ruleID{grant.Tenant, name}]; rule != nil {
			return rule.check
		}
		return nil
	}, q)
	if err != nil {
		a.failLease(w, r, grant.Tenant, err)
		return
	}
	writeLeaseAnswer(w, rule, ans, string(ret.Status))
}

func (a *API) handleReturnLease(w http.ResponseWriter, r *http.Request) {
	st := a.state.Load()
	grant, aerr := checkKey(st.snap, r)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	raw := r.URL.Query().Get("unused")
	unused, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		a.fail(w, badRequest("Query parameter \"unused\" is required: how many of the lease's units were not admitted, a whole number (0 when all were); got %q.", raw))
		return
	}
	id := r.PathValue("id")
	res, err := a.engine.ReturnLease(r.Context(), st.snap.Tenants[grant.Tenant].CounterNamespace(), id, unused)
	if err != nil {
		a.failLease(w, r, grant.Tenant, err)
		return
	}
	writeJSON(w, http.StatusOK, checkapi.ReturnAnswer{ID: id, Status: string(res.Status)})
}

// leaseRule is the leasing rule of tenant that route selects.
func leaseRule(st *state, tenant, route string) (*compiledRule, *apiError) {
	matched, ok := st.snap.Match(tenant, route)
	if !ok {
		return nil, &apiError{http.StatusConflict, "rule_not_leased",
			fmt.Sprintf("No rule of this tenant matches route %q: nothing limits it, so there is no quota to lease.", route)}
	}
	rule := st.rules[ruleID{tenant, matched.Name}]
	if rule == nil { // cannot happen: rules is built from the same snapshot
		return nil, &apiError{http.StatusServiceUnavailable, "catalog_reloading", "The rule set is being reloaded; retry shortly."}
	}
	return rule, nil
}

// leaseQuery is the part of a lease query a body gives, checked.
func leaseQuery(holder string, want, ttlMs int64) (check.LeaseQuery, *apiError) {
	switch {
	case holder == "":
		return check.LeaseQuery{}, badRequest("Field \"holder\" is required: a name for the lease's holder (a process), 1-%d letters, digits, '_', '.' or '-'.", check.MaxRemoteHolderBytes)
	case want < 1:
		return check.LeaseQuery{}, badRequest("Field \"want\" must be at least 1: the most units the holder asks for, got %d.", want)
	case ttlMs < 0 || ttlMs > check.MaxRemoteLeaseTTL.Milliseconds():
		return check.LeaseQuery{}, badRequest("Field \"ttl_ms\" must be %d to %d milliseconds (absent: %d), got %d.",
			check.MinRemoteLeaseTTL.Milliseconds(), check.MaxRemoteLeaseTTL.Milliseconds(), check.DefaultRemoteLeaseTTL.Milliseconds(), ttlMs)
	}
	return check.LeaseQuery{Holder: holder, Want: want, TTL: time.Duration(ttlMs) * time.Millisecond}, nil
}

// failLease answers a lease call the engine refused or could not serve.
func (a *API) failLease(w http.ResponseWriter, r *http.Request, tenant string, err error) {
	switch {
	case errors.Is(err, check.ErrRuleNotLeased):
		a.fail(w, &apiError{http.StatusConflict, "rule_not_leased", sentence(err.Error())})
	case errors.Is(err, check.ErrLeaseNotFound):
		a.fail(w, errLeaseNotFound)
	case errors.Is(err, sluice.ErrStoreUnavailable):
		a.fail(w, errRuleFailsClosed)
	default:
		a.failEngine(w, r, err, errLeasesUnavailable, "lease failed", "tenant", tenant)
	}
}

// writeLeaseAnswer answers a take or renew: 200 when allowed, 429 with
// Retry-After when denied, with the rate-limit headers of a check.
func writeLeaseAnswer(w http.ResponseWriter, rule *compiledRule, ans check.LeaseAnswer, returned string) {
	d := ans.Decision
	body := checkapi.LeaseAnswer{Decision: checkapi.NewDecision(rule.Name, d, false), Returned: returned}
	if ans.Grant.Granted > 0 {
		body.Lease = &checkapi.Lease{ID: ans.ID, Granted: ans.Grant.Granted,
			ExpiresInMs: ans.Grant.ExpiresIn.Milliseconds(), UsableForMs: ans.UsableFor.Milliseconds()}
	}
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusTooManyRequests
	}
	ratelimitheader.SetWithPolicy(w.Header(), rule.Name, rule.policyHeader, d)
	if !d.Allowed && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", fmt.Sprint(ratelimitheader.RetryAfterSeconds(d.RetryAfter)))
	}
	writeJSON(w, status, body)
}
