package adminapi

import (
	"bytes"
	"encoding/csv"
	"strconv"
	"time"

	"github.com/sluicelabs/sluice/usage"
)

// UsageRow is one period of a rule's usage in GET /v1/tenants/{t}/usage.
type UsageRow struct {
	Rule         string    `json:"rule" yaml:"rule"`
	Start        time.Time `json:"start" yaml:"start"`
	Allowed      int64     `json:"allowed" yaml:"allowed"`
	Denied       int64     `json:"denied" yaml:"denied"`
	ShadowDenied int64     `json:"shadow_denied" yaml:"shadow_denied"`
	Degraded     int64     `json:"degraded" yaml:"degraded"`
	Shed         int64     `json:"shed" yaml:"shed"`
	Units        int64     `json:"units" yaml:"units"`
}

// Usage is a tenant's usage history over a range: the answer of GET
// /v1/tenants/{t}/usage.
type Usage struct {
	Tenant string `json:"tenant" yaml:"tenant"`
	// Rule is the rule asked for; nil for every rule.
	Rule *string    `json:"rule" yaml:"rule"`
	Step string     `json:"step" yaml:"step"`
	From time.Time  `json:"from" yaml:"from"`
	To   time.Time  `json:"to" yaml:"to"`
	Rows []UsageRow `json:"rows" yaml:"rows"`
	// Gaps are minutes whose counts an instance dropped (its buffer was
	// full while the database could not be written): the rows there are
	// short by what it dropped.
	Gaps []UsageGap `json:"gaps" yaml:"gaps"`
}

// UsageGap is a range of minutes [From, To) of a rule with counts dropped.
type UsageGap struct {
	Rule string    `json:"rule" yaml:"rule"`
	From time.Time `json:"from" yaml:"from"`
	To   time.Time `json:"to" yaml:"to"`
}

// NewUsage is the answer for tenant's rows and gaps read with q.
func NewUsage(tenant string, q usage.Query, rows []usage.Row, gaps []usage.Gap) Usage {
	from, to := q.Bounds()
	u := Usage{Tenant: tenant, Step: string(q.Step), From: from, To: to, Rows: make([]UsageRow, 0, len(rows)),
		Gaps: make([]UsageGap, 0, len(gaps))}
	for _, g := range gaps {
		u.Gaps = append(u.Gaps, UsageGap{Rule: g.Rule, From: g.From.UTC(), To: g.To.UTC()})
	}
	if q.Rule != "" {
		rule := q.Rule
		u.Rule = &rule
	}
	for _, r := range rows {
		u.Rows = append(u.Rows, UsageRow{Rule: r.Rule, Start: r.Start.UTC(), Allowed: r.Allowed, Denied: r.Denied,
			ShadowDenied: r.ShadowDenied, Degraded: r.Degraded, Shed: r.Shed, Units: r.Units})
	}
	return u
}

// CSV writes the rows as CSV, with a header line naming the columns.
func (u Usage) CSV() []byte {
	records := [][]string{{"start", "rule", "allowed", "denied", "shadow_denied", "degraded", "shed", "units"}}
	for _, r := range u.Rows {
		records = append(records, []string{r.Start.Format(time.RFC3339), r.Rule, itoa(r.Allowed), itoa(r.Denied),
			itoa(r.ShadowDenied), itoa(r.Degraded), itoa(r.Shed), itoa(r.Units)})
	}
	return csvOf(records)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// csvOf is records as CSV.
func csvOf(records [][]string) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.WriteAll(records) // a bytes.Buffer does not fail
	return buf.Bytes()
}

// TopSubject is one of a rule's heaviest subjects in GET
// /v1/tenants/{t}/usage/top.
type TopSubject struct {
	Rule    string `json:"rule" yaml:"rule"`
	Subject string `json:"subject" yaml:"subject"`
	Denied  int64  `json:"denied" yaml:"denied"`
	Units   int64  `json:"units" yaml:"units"`
}

// TopSubjects is the answer of GET /v1/tenants/{t}/usage/top.
type TopSubjects struct {
	Tenant string `json:"tenant" yaml:"tenant"`
	// Rule is the rule asked for; nil for every rule.
	Rule     *string      `json:"rule" yaml:"rule"`
	By       string       `json:"by" yaml:"by"`
	From     time.Time    `json:"from" yaml:"from"`
	To       time.Time    `json:"to" yaml:"to"`
	Subjects []TopSubject `json:"subjects" yaml:"subjects"`
}

// NewTopSubjects is the answer for tenant's subjects read with q.
func NewTopSubjects(tenant string, q usage.TopQuery, subjects []usage.TopSubject) TopSubjects {
	from, to := q.Bounds()
	out := TopSubjects{Tenant: tenant, By: string(q.By), From: from, To: to, Subjects: make([]TopSubject, 0, len(subjects))}
	if q.Rule != "" {
		rule := q.Rule
		out.Rule = &rule
	}
	for _, s := range subjects {
		out.Subjects = append(out.Subjects, TopSubject{Rule: s.Rule, Subject: s.Subject, Denied: s.Denied, Units: s.Units})
	}
	return out
}

// CSV writes the subjects as CSV, with a header line naming the columns.
func (t TopSubjects) CSV() []byte {
	records := [][]string{{"rule", "subject", "denied", "units"}}
	for _, s := range t.Subjects {
		records = append(records, []string{s.Rule, s.Subject, itoa(s.Denied), itoa(s.Units)})
	}
	return csvOf(records)
}
