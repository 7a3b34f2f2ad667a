package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/usage"
)

// handleUsage answers a tenant's usage history: the fleet's decisions per
// rule and period, summed by the catalog database from every instance's
// flushes, as JSON or (format=csv, or Accept: text/csv) CSV. A tenant's
// admin key reads its own tenant; the counts are of the tenant as it is now
// (a tenant deleted and created again starts with no history).
func (a *API) handleUsage(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		reader, ok := a.catalog.(usage.Reader)
		if !ok {
			return 0, nil, &apiError{http.StatusNotFound, "not_found", "This catalog keeps no usage history."}
		}
		q, asCSV, aerr := usageQuery(r, time.Now())
		if aerr != nil {
			return 0, nil, aerr
		}
		tenantName := r.PathValue("tenant")
		tenant, err := a.catalog.Tenant(ctx, tenantName)
		if err != nil {
			return 0, nil, err
		}
		q.Namespace = tenant.CounterNamespace()
		rows, err := reader.ReadUsage(ctx, q)
		if err != nil {
			return 0, nil, err
		}
		body := adminapi.NewUsage(tenantName, q, rows)
		if asCSV {
			return http.StatusOK, rawBody{"text/csv; charset=utf-8", body.CSV()}, nil
		}
		return http.StatusOK, body, nil
	})
}

// usageQuery reads GET .../usage's query parameters: rule, step (minute,
// hour or day; default minute), from and to (RFC 3339; default the last
// hour, day or 30 days up to now, by step), format (json or csv).
func usageQuery(r *http.Request, now time.Time) (usage.Query, bool, *apiError) {
	v := r.URL.Query()
	if aerr := onlyParams(v, "GET .../usage", "rule", "step", "from", "to", "format"); aerr != nil {
		return usage.Query{}, false, aerr
	}
	q := usage.Query{Rule: v.Get("rule"), Step: usage.Step(v.Get("step")), To: now}
	if q.Rule != "" {
		if err := sluice.RuleName(q.Rule).Validate(); err != nil {
			return q, false, badRequest("rule=%q: %s", q.Rule, sentence(err.Error()))
		}
	}
	if q.Step == "" {
		q.Step = usage.StepMinute
	}
	if q.Step.Duration() == 0 {
		return q, false, badRequest("step=%q is not one of minute, hour or day.", q.Step)
	}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		if s := v.Get(f.name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return q, false, badRequest("%s=%q is not a time; write it as RFC 3339, like 2026-12-01T17:00:00Z.", f.name, s)
			}
			*f.to = t
		}
	}
	if v.Get("from") == "" {
		q.From = q.To.Add(-usage.DefaultSpan(q.Step))
	}
	asCSV := strings.Contains(r.Header.Get("Accept"), "text/csv")
	switch v.Get("format") {
	case "":
	case "csv":
		asCSV = true
	case "json":
		asCSV = false
	default:
		return q, false, badRequest("format=%q is not json or csv.", v.Get("format"))
	}
	// The namespace is filled in by the caller; validate the rest now.
	probe := q
	probe.Namespace = "-"
	if err := probe.Validate(); err != nil {
		return q, false, badRequest("%s", sentence(err.Error()))
	}
	return q, asCSV, nil
}

// onlyParams refuses query parameters other than names, and any given twice.
func onlyParams(v url.Values, call string, names ...string) *apiError {
	for name := range v {
		known := false
		for _, n := range names {
			known = known || n == name
		}
		if !known {
			return badRequest("Unknown query parameter %q; %s takes %s.", name, call, strings.Join(names, ", "))
		}
		if len(v[name]) > 1 {
			return badRequest("Query parameter %q is given %d times; give it once.", name, len(v[name]))
		}
	}
	return nil
}
