package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicelabs/sluice"
)

// auditEntryBody is an audit entry as GET /v1/audit writes it.
type auditEntryBody struct {
	ID     int64           `json:"id"`
	Time   time.Time       `json:"time"`
	Actor  string          `json:"actor"`
	Tenant *string         `json:"tenant"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// handleAudit lists recorded catalog changes, newest first: all of them for
// the operator, its own tenant's (since it was last created) for a tenant
// admin key.
func (a *API) handleAudit(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, p principal) (int, any, error) {
		q, aerr := auditQuery(r.URL.Query())
		if aerr != nil {
			return 0, nil, aerr
		}
		if !p.operator {
			if q.Tenant != "" && q.Tenant != p.tenant {
				return 0, nil, errOtherTenant
			}
			q.Tenant, q.CurrentTenantOnly = p.tenant, true
		}
		entries, err := a.catalog.Audit(ctx, q)
		if err != nil {
			return 0, nil, err
		}
		out := make([]auditEntryBody, 0, len(entries))
		for _, e := range entries {
			b := auditEntryBody{ID: e.ID, Time: e.Time.UTC(), Actor: e.Actor, Action: e.Action, Target: e.Target,
				Before: nullJSON(e.Before), After: nullJSON(e.After)}
			if e.Tenant != "" {
				b.Tenant = &e.Tenant
			}
			out = append(out, b)
		}
		// A full page may have more below it; a short one is the last.
		var next *int64
		if limit := q.Limit; len(entries) > 0 && len(entries) == orDefault(limit, sluice.DefaultAuditLimit) {
			next = &entries[len(entries)-1].ID
		}
		return http.StatusOK, map[string]any{"entries": out, "next_before": next}, nil
	})
}

// orDefault returns v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func nullJSON(doc json.RawMessage) json.RawMessage {
	if doc == nil {
		return json.RawMessage("null")
	}
	return doc
}

// auditQuery reads GET /v1/audit's query parameters.
func auditQuery(v url.Values) (sluice.AuditQuery, *apiError) {
	for name := range v {
		switch name {
		case "tenant", "actor", "action", "since", "until", "before", "limit":
		default:
			return sluice.AuditQuery{}, badRequest("Unknown query parameter %q; GET /v1/audit takes tenant, actor, action, since, until, before and limit.", name)
		}
		if len(v[name]) > 1 {
			return sluice.AuditQuery{}, badRequest("Query parameter %q is given %d times; give it once.", name, len(v[name]))
		}
	}
	q := sluice.AuditQuery{Tenant: v.Get("tenant"), Actor: v.Get("actor"), Action: v.Get("action")}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(f.name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return q, badRequest("%s=%q is not a time; write it as RFC 3339, like 2026-12-01T17:00:00Z.", f.name, s)
			}
			*f.to = t
		}
	}
	for _, f := range []struct {
		name string
		to   func(int64)
	}{{"before", func(n int64) { q.Before = n }}, {"limit", func(n int64) { q.Limit = int(n) }}} {
		if s := v.Get(f.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 {
				return q, badRequest("%s=%q must be a positive whole number.", f.name, s)
			}
			f.to(n)
		}
	}
	if err := q.Validate(); err != nil {
		return q, errorFor(err)
	}
	return q, nil
}
