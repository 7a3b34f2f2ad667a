package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// DefaultAdminWriteLimit is how fast one tenant's admin keys may change the
// catalog (or reset counters) when Options.AdminWriteLimit is unset: 50
// writes a second, in bursts of up to 200.
var DefaultAdminWriteLimit = sluice.TokenBucket(200, 50).Named("writes")

// writeLimitNamespace keys the limit's counters apart from every tenant's
// (a tenant name is a slug, so it never contains ':').
const writeLimitNamespace = "sluice:admin"

// newWriteLimit returns the rule admin writes are checked against, one value
// for the life of the API so the deny cache answers a throttled tenant in
// process. FailLocal: with the store down an in-process limit still holds.
func newWriteLimit(l sluice.Limit) *check.Rule {
	return &check.Rule{Namespace: writeLimitNamespace, Name: "writes", Limits: []sluice.Limit{l}, Mode: sluice.FailLocal}
}

// limitWrite charges one write to p's tenant and reports whether the call
// may go on; if not, it has answered 429 (or 503). The operator is not
// limited: it is who sets the limit, and sluice apply writes as it.
func (a *API) limitWrite(ctx context.Context, w http.ResponseWriter, r *http.Request, p principal) bool {
	if a.writeLimit == nil || p.operator || r.Method == http.MethodGet {
		return true
	}
	res, err := a.engine.Check(ctx, check.Query{Rule: a.writeLimit, Subject: p.tenant, Cost: 1})
	if err != nil {
		a.fail(w, errorFor(err))
		return false
	}
	d := res.Decision
	if d.Allowed {
		return true
	}
	ratelimitheader.Set(w.Header(), "admin-writes", d)
	ms := d.RetryAfter.Milliseconds()
	if d.RetryAfter > 0 && ms == 0 {
		ms = 1 // never "retry now" before the quota is back
	}
	writeJSON(w, http.StatusTooManyRequests, checkapi.ErrorBody{Error: checkapi.ErrorDetail{
		Code:         "rate_limited",
		Message:      fmt.Sprintf("Tenant %s is making admin changes faster than this server allows (%s); retry in %d ms.", p.tenant, a.writeLimit.Limits[0], ms),
		RetryAfterMs: &ms,
	}})
	return false
}
