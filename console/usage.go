package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/adminapi"
)

// The usage page: a tenant's history as the catalog database keeps it
// (GET /v1/tenants/{t}/usage and .../usage/top), the fleet's sums, as a
// chart per range and rule, totals and the heaviest subjects.

// usageRange is one choice of the page: how far back, at what step.
type usageRange struct {
	Name string
	span time.Duration
	step string
}

var usageRanges = []usageRange{
	{"1h", time.Hour, "minute"},
	{"24h", 24 * time.Hour, "minute"},
	{"30d", 30 * 24 * time.Hour, "hour"},
}

func rangeNamed(name string) (usageRange, bool) {
	for _, r := range usageRanges {
		if r.Name == name {
			return r, true
		}
	}
	return usageRanges[1], name == ""
}

type usageTotal struct {
	Rule                                                 string
	Allowed, Denied, ShadowDenied, Degraded, Shed, Units int64
}

type usagePage struct {
	Rules      []string
	Rule       string
	Range      string
	Ranges     []string
	Filter     string
	ChartSrc   string
	Totals     []usageTotal
	TopDenied  []adminapi.TopSubject
	TopUnits   []adminapi.TopSubject
	Error      string
	Incomplete bool // the filter hid subjects
	Gaps       []adminapi.UsageGap
}

// usageQuery is the API query of the page's rule and range.
func usageQuery(rule string, rg usageRange, now time.Time) url.Values {
	q := url.Values{"from": {now.Add(-rg.span).UTC().Format(time.RFC3339)}, "to": {now.UTC().Format(time.RFC3339)}}
	if rule != "" {
		q.Set("rule", rule)
	}
	return q
}

func (c *Console) handleUsage(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	in := r.URL.Query()
	p := usagePage{Rule: in.Get("rule"), Filter: strings.TrimSpace(in.Get("subject"))}
	rg, ok := rangeNamed(in.Get("range"))
	p.Range = rg.Name
	for _, x := range usageRanges {
		p.Ranges = append(p.Ranges, x.Name)
	}
	if !ok {
		p.Error = "Range " + in.Get("range") + " is not one of 1h, 24h or 30d; showing 24h."
	}
	var rules struct{ Rules []adminapi.Rule }
	if !c.get(w, r, sess, apiPath("tenants", tenant, "rules"), &rules) {
		return
	}
	for _, rule := range rules.Rules {
		p.Rules = append(p.Rules, rule.Name)
	}
	sort.Strings(p.Rules)
	now := time.Now()
	q := usageQuery(p.Rule, rg, now)
	q.Set("step", rg.step)
	var hist adminapi.Usage
	if !c.get(w, r, sess, apiPath("tenants", tenant, "usage")+"?"+q.Encode(), &hist) {
		return
	}
	p.Gaps = hist.Gaps
	totals := map[string]*usageTotal{}
	for _, row := range hist.Rows {
		t := totals[row.Rule]
		if t == nil {
			t = &usageTotal{Rule: row.Rule}
			totals[row.Rule] = t
		}
		t.Allowed += row.Allowed
		t.Denied += row.Denied
		t.ShadowDenied += row.ShadowDenied
		t.Degraded += row.Degraded
		t.Shed += row.Shed
		t.Units += row.Units
	}
	for _, t := range totals {
		p.Totals = append(p.Totals, *t)
	}
	sort.Slice(p.Totals, func(i, j int) bool { return p.Totals[i].Rule < p.Totals[j].Rule })
	for _, by := range []string{"denied", "units"} {
		tq := usageQuery(p.Rule, rg, now)
		tq.Set("by", by)
		tq.Set("limit", "100")
		var top adminapi.TopSubjects
		if !c.get(w, r, sess, apiPath("tenants", tenant, "usage", "top")+"?"+tq.Encode(), &top) {
			return
		}
		var kept []adminapi.TopSubject
		for _, s := range top.Subjects {
			if p.Filter == "" || strings.Contains(s.Subject, p.Filter) {
				kept = append(kept, s)
			} else {
				p.Incomplete = true
			}
		}
		if len(kept) > 20 {
			kept = kept[:20]
		}
		if by == "denied" {
			p.TopDenied = kept
		} else {
			p.TopUnits = kept
		}
	}
	chart := url.Values{"range": {rg.Name}}
	if p.Rule != "" {
		chart.Set("rule", p.Rule)
	}
	p.ChartSrc = Prefix + "tenants/" + url.PathEscape(tenant) + "/usage.json?" + chart.Encode()
	c.render(w, r, sess, http.StatusOK, "usage", p)
}

// usageSeries is the chart's data: one point per period of the range,
// zero where nothing was stored.
// A period that overlaps a gap (counts an instance dropped) is null in
// every series, so the chart shows a gap rather than a quiet period.
type usageSeries struct {
	Step         int64    `json:"step"` // seconds
	Times        []int64  `json:"times"`
	Allowed      []*int64 `json:"allowed"`
	Denied       []*int64 `json:"denied"`
	ShadowDenied []*int64 `json:"shadow_denied"`
	Degraded     []*int64 `json:"degraded"`
	Shed         []*int64 `json:"shed"`
}

func (c *Console) handleUsageJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	tenant := r.PathValue("tenant")
	rg, _ := rangeNamed(r.URL.Query().Get("range"))
	q := usageQuery(r.URL.Query().Get("rule"), rg, time.Now())
	q.Set("step", rg.step)
	a := c.call(r, sess, http.MethodGet, apiPath("tenants", tenant, "usage")+"?"+q.Encode(), nil)
	var hist adminapi.Usage
	if !a.ok() || a.decode(&hist) != nil {
		status := a.Status
		if a.ok() {
			status = http.StatusInternalServerError
		}
		http.Error(w, a.Message, status)
		return
	}
	step := time.Minute
	if rg.step == "hour" {
		step = time.Hour
	}
	out := usageSeries{Step: int64(step / time.Second)}
	index := map[int64]int{}
	for t := hist.From; t.Before(hist.To); t = t.Add(step) {
		index[t.Unix()] = len(out.Times)
		out.Times = append(out.Times, t.Unix())
	}
	series := []*[]*int64{&out.Allowed, &out.Denied, &out.ShadowDenied, &out.Degraded, &out.Shed}
	for _, s := range series {
		*s = make([]*int64, len(out.Times))
		for i := range *s {
			(*s)[i] = new(int64)
		}
	}
	for _, row := range hist.Rows {
		i, ok := index[row.Start.Unix()]
		if !ok {
			continue
		}
		for k, n := range []int64{row.Allowed, row.Denied, row.ShadowDenied, row.Degraded, row.Shed} {
			*(*series[k])[i] += n
		}
	}
	for i, t := range out.Times {
		start := time.Unix(t, 0)
		for _, g := range hist.Gaps {
			if g.From.Before(start.Add(step)) && g.To.After(start) {
				for _, s := range series {
					(*s)[i] = nil
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
