package httpapi

import (
	"net/http"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/metrics"
)

// Holds over HTTP: a check with "reserve": true, or one through a
// concurrency limit, answers with "hold": {"id", "expires_in_ms"}; these
// endpoints settle, release and extend it with a check-role key of the
// tenant that took it. Another tenant's hold id is unknown to it.
//
// Settle applies the actual cost, so a settle that could not apply it (the
// hold expired, or was settled or released before) is an error: 409, the
// status in the message. Release and extend are idempotent: 200 with the
// status ("released", "extended", or "expired", "finished", "unknown" when
// nothing changed).

var errHoldsUnavailable = &apiError{http.StatusServiceUnavailable, "store_unavailable",
	"The rate-limit store is unavailable, and holds live only there; retry shortly."}

// holdAnswer is the body of a hold operation's answer.
type holdAnswer struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

// settleRequest is the body of POST /v1/holds/{id}/settle.
type settleRequest struct {
	Cost *int64 `json:"cost"`
}

func (a *API) handleSettleHold(w http.ResponseWriter, r *http.Request) {
	var body settleRequest
	if aerr := decodeBody(w, r, &body); aerr != nil {
		a.fail(w, aerr)
		return
	}
	if body.Cost == nil {
		a.fail(w, badRequest("Field \"cost\" is required: the actual cost of the request the hold reserved for."))
		return
	}
	a.holdOp(w, r, sluice.HoldSettle, *body.Cost)
}

func (a *API) handleReleaseHold(w http.ResponseWriter, r *http.Request) {
	a.holdOp(w, r, sluice.HoldRelease, 0)
}

func (a *API) handleExtendHold(w http.ResponseWriter, r *http.Request) {
	a.holdOp(w, r, sluice.HoldExtend, 0)
}

func (a *API) holdOp(w http.ResponseWriter, r *http.Request, action sluice.HoldAction, cost int64) {
	st := a.state.Load()
	grant, aerr := checkKey(st.snap, r)
	if aerr != nil {
		a.fail(w, aerr)
		return
	}
	id := r.PathValue("id")
	op := sluice.HoldOp{Tenant: st.snap.Tenants[grant.Tenant].CounterNamespace(), ID: id, Action: action, Cost: cost,
		// A settle is judged against the rule as it is now, not as it
		// was when the hold was taken.
		Limits: func(rule string) []sluice.Limit {
			if r := st.rules[ruleID{grant.Tenant, rule}]; r != nil {
				return r.check.Limits
			}
			return nil
		}}
	res, err := a.engine.Hold(r.Context(), metrics.Labels{Source: metrics.SourceHTTP, Tenant: grant.Tenant}, op)
	if err != nil {
		a.failEngine(w, r, err, errHoldsUnavailable, "hold failed", "tenant", grant.Tenant, "action", string(action))
		return
	}
	if action == sluice.HoldSettle {
		switch res.Status {
		case sluice.HoldUnknown:
			a.fail(w, &apiError{http.StatusNotFound, "hold_not_found",
				"No hold of this tenant has this id: it was never issued to this tenant, or expired long ago."})
			return
		case sluice.HoldExpired:
			a.fail(w, &apiError{http.StatusConflict, "hold_expired",
				"The hold expired before it was settled: its estimate stands and the actual cost was not applied."})
			return
		case sluice.HoldFinished:
			a.fail(w, &apiError{http.StatusConflict, "hold_finished",
				"The hold was already settled or released; this settle changed nothing."})
			return
		}
	}
	writeJSON(w, http.StatusOK, holdAnswer{ID: id, Status: string(res.Status), ExpiresInMs: res.ExpiresIn.Milliseconds()})
}
