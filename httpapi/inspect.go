package httpapi

import (
	"context"
	"net/http"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
)

// Caller is who an admin credential belongs to: the operator, or a tenant
// through one of its admin-role keys.
type Caller struct {
	Operator bool
	// Tenant is the tenant of an admin-role key ("" for the operator).
	Tenant string
}

// AdminCaller authenticates secret as the admin API does (the operator
// token, or an active admin-role key of an active tenant), for faces such as
// the web console that sign a user in once and then call the API's handlers
// on their behalf. The error is a sentence fit to show the user.
func (a *API) AdminCaller(secret string) (Caller, error) {
	r := &http.Request{Header: http.Header{"Authorization": {"Bearer " + secret}}}
	p, aerr := a.authorize(r)
	if aerr != nil {
		return Caller{}, aerr
	}
	return Caller{Operator: p.operator, Tenant: p.tenant}, nil
}

// CatalogVersion returns the version of the catalog snapshot this instance
// serves checks from.
func (a *API) CatalogVersion() int64 { return a.state.Load().snap.Version }

// DefaultFailureMode is the failure mode this API applies to rules stored
// without one (Options.DefaultFailureMode, closed unless set): the console
// names it beside such rules.
func (a *API) DefaultFailureMode() sluice.FailureMode { return a.defaultMode }

// handlePeekSubject answers what a subject has left under each limit of a
// rule: a check of cost 0, which consumes nothing, under the limits a check
// of the subject gets (its override's, or those of the plan ?plan= names). It is made on a rule of
// its own, so it is neither counted in the metrics nor kept in the deny
// cache, and it honours the rule's failure mode like any check.
func (a *API) handlePeekSubject(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		rule, peek, err := a.subjectRule(ctx, r.PathValue("tenant"), r.PathValue("name"))
		if err != nil {
			return 0, nil, err
		}
		plan := r.URL.Query().Get("plan")
		if len(plan) > sluice.MaxNameBytes {
			return 0, nil, badRequest("Query parameter \"plan\" is %d bytes long; plan names are at most %d.", len(plan), sluice.MaxNameBytes)
		}
		res, err := a.engine.Check(ctx, check.Query{Rule: peek, Subject: r.PathValue("subject"), Cost: 0, Plan: plan})
		if err != nil {
			return 0, nil, err
		}
		body := checkapi.NewDecision(rule.Name, res.Decision, rule.Shadow)
		body.Plan, body.Override = res.Plan, res.Override
		return http.StatusOK, body, nil
	})
}

// subjectRule reads a tenant's rule from the catalog and returns it with an
// engine rule over its counters for one-off calls (a peek, a reset): made
// without NewRule, so neither counted in the metrics nor observed, and with
// an identity of its own, so the deny cache keeps nothing of it.
func (a *API) subjectRule(ctx context.Context, tenant, name string) (sluice.Rule, *check.Rule, error) {
	t, err := a.catalog.Tenant(ctx, tenant)
	if err != nil {
		return sluice.Rule{}, nil, err
	}
	rule, err := a.catalog.Rule(ctx, tenant, name)
	if err != nil {
		return sluice.Rule{}, nil, err
	}
	mode := rule.FailureMode
	if mode == "" {
		mode = a.defaultMode
	}
	var overrides *sluice.OverrideMatcher
	if len(rule.Overrides) > 0 {
		overrides = sluice.NewOverrideMatcher(rule.Overrides)
	}
	return rule, &check.Rule{Namespace: t.CounterNamespace(), Name: name, Limits: rule.Limits, Plans: rule.Plans, Overrides: overrides,
		Mode: mode, Shadow: rule.Shadow}, nil
}
