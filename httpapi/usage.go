package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/usage"
)

// handleUsage answers a tenant's usage history: the fleet's decisions per
// rule and period, summed by the catalog database from every instance's
// flushes. A tenant's admin key reads its own tenant; the counts are of the
// tenant as it is now (a tenant deleted and created again starts with no
// history).
func (a *API) handleUsage(w http.ResponseWriter, r *http.Request) {
	a.usageAnswer(w, r, func(ctx context.Context, reader usage.Reader, tenant, namespace string) (csvBody, *apiError, error) {
		q, asCSV, aerr := usageQuery(r, time.Now())
		if aerr != nil {
			return nil, aerr, nil
		}
		q.Namespace = namespace
		rows, err := reader.ReadUsage(ctx, q)
		if err != nil {
			return nil, nil, err
		}
		gaps, err := reader.ReadGaps(ctx, q)
		if err != nil {
			return nil, nil, err
		}
		return answerAs(adminapi.NewUsage(tenant, q, rows, gaps), asCSV), nil, nil
	})
}

// handleTopSubjects answers a tenant's heaviest subjects over a range of
// hours, by denials or by units, summed over the instances that counted
// them (see usage.TopSubject for what the figures are).
func (a *API) handleTopSubjects(w http.ResponseWriter, r *http.Request) {
	a.usageAnswer(w, r, func(ctx context.Context, reader usage.Reader, tenant, namespace string) (csvBody, *apiError, error) {
		q, asCSV, aerr := topQuery(r, time.Now())
		if aerr != nil {
			return nil, aerr, nil
		}
		q.Namespace = namespace
		subjects, err := reader.ReadTop(ctx, q)
		if err != nil {
			return nil, nil, err
		}
		return answerAs(adminapi.NewTopSubjects(tenant, q, subjects), asCSV), nil, nil
	})
}

// csvBody is a usage answer, written as JSON unless it asked for CSV.
type csvBody interface{ CSV() []byte }

type csvAnswer struct{ csvBody }

// answerAs is body as JSON, or as CSV when asCSV.
func answerAs(body csvBody, asCSV bool) csvBody {
	if asCSV {
		return csvAnswer{body}
	}
	return body
}

// usageAnswer runs read for the tenant of the path, with the catalog's
// usage reader and the namespace the tenant's history is kept under (that
// of the tenant as it is now), and writes its answer.
func (a *API) usageAnswer(w http.ResponseWriter, r *http.Request,
	read func(ctx context.Context, reader usage.Reader, tenant, namespace string) (csvBody, *apiError, error)) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		reader, ok := a.catalog.(usage.Reader)
		if !ok {
			return 0, nil, &apiError{http.StatusNotFound, "not_found", "This catalog keeps no usage history."}
		}
		tenant := r.PathValue("tenant")
		t, err := a.catalog.Tenant(ctx, tenant)
		if err != nil {
			return 0, nil, err
		}
		body, aerr, err := read(ctx, reader, tenant, t.CounterNamespace())
		switch {
		case aerr != nil:
			return 0, nil, aerr
		case err != nil:
			return 0, nil, err
		}
		if c, ok := body.(csvAnswer); ok {
			return http.StatusOK, rawBody{"text/csv; charset=utf-8", c.CSV()}, nil
		}
		return http.StatusOK, body, nil
	})
}

// topQuery reads GET .../usage/top's query parameters: rule, by (denied
// or units; default denied), from and to (RFC 3339; default the hour under
// way and the one before it), limit (default usage.TopN), format.
func topQuery(r *http.Request, now time.Time) (usage.TopQuery, bool, *apiError) {
	v := r.URL.Query()
	if aerr := onlyParams(v, "GET .../usage/top", "rule", "by", "from", "to", "limit", "format"); aerr != nil {
		return usage.TopQuery{}, false, aerr
	}
	q := usage.TopQuery{Rule: v.Get("rule"), By: usage.By(v.Get("by")), To: now, Limit: usage.TopN}
	switch q.By {
	case "":
		q.By = usage.ByDenied
	case usage.ByDenied, usage.ByUnits:
	default:
		return q, false, badRequest("by=%q is not denied or units.", q.By)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > usage.MaxTopLimit {
			return q, false, badRequest("limit=%q must be a whole number between 1 and %d.", s, usage.MaxTopLimit)
		}
		q.Limit = n
	}
	common, asCSV, aerr := rangeParams(r, v, q.Rule, time.Hour, now)
	if aerr != nil {
		return q, false, aerr
	}
	q.From, q.To = common.From, common.To
	probe := q
	probe.Namespace = "-"
	if err := probe.Validate(); err != nil {
		return q, false, badRequest("%s", sentence(err.Error()))
	}
	return q, asCSV, nil
}

// usageQuery reads GET .../usage's query parameters: rule, step (minute,
// hour or day; default minute), from and to (RFC 3339; default the last
// hour, day or 30 days up to now, by step), format (json or csv).
func usageQuery(r *http.Request, now time.Time) (usage.Query, bool, *apiError) {
	v := r.URL.Query()
	if aerr := onlyParams(v, "GET .../usage", "rule", "step", "from", "to", "format"); aerr != nil {
		return usage.Query{}, false, aerr
	}
	q := usage.Query{Step: usage.Step(v.Get("step"))}
	if q.Step == "" {
		q.Step = usage.StepMinute
	}
	if q.Step.Duration() == 0 {
		return q, false, badRequest("step=%q is not one of minute, hour or day.", q.Step)
	}
	common, asCSV, aerr := rangeParams(r, v, v.Get("rule"), usage.DefaultSpan(q.Step), now)
	if aerr != nil {
		return q, false, aerr
	}
	q.Rule, q.From, q.To = v.Get("rule"), common.From, common.To
	// The namespace is filled in by the caller; validate the rest now.
	probe := q
	probe.Namespace = "-"
	if err := probe.Validate(); err != nil {
		return q, false, badRequest("%s", sentence(err.Error()))
	}
	return q, asCSV, nil
}

// rangeParams reads the parameters the usage calls share: rule (checked),
// from and to (RFC 3339; to defaults to now, from to span before it) and
// format (json or csv, or Accept: text/csv).
func rangeParams(r *http.Request, v url.Values, rule string, span time.Duration, now time.Time) (usage.Query, bool, *apiError) {
	q := usage.Query{To: now}
	if rule != "" {
		if err := sluice.RuleName(rule).Validate(); err != nil {
			return q, false, badRequest("rule=%q: %s", rule, sentence(err.Error()))
		}
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
		q.From = q.To.Add(-span)
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
