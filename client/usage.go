package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluicelabs/sluice/adminapi"
)

// Usage and UsageRow are a tenant's usage history as the server answers it.
type (
	Usage    = adminapi.Usage
	UsageRow = adminapi.UsageRow
)

// UsageQuery selects a tenant's usage: Rule ("" every rule), Step
// ("minute", "hour" or "day"; "" minute), From and To (zero: the server's
// defaults, the last hour, day or 30 days by step).
type UsageQuery struct {
	Rule, Step string
	From, To   time.Time
}

func (q UsageQuery) values() url.Values {
	v := url.Values{}
	if q.Rule != "" {
		v.Set("rule", q.Rule)
	}
	if q.Step != "" {
		v.Set("step", q.Step)
	}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339))
	}
	return v
}

// Usage reads a tenant's usage history.
func (a *Admin) Usage(ctx context.Context, tenant string, q UsageQuery) (Usage, error) {
	var u Usage
	err := a.doQuery(ctx, http.MethodGet, []string{"tenants", tenant, "usage"}, q.values(), nil, &u)
	return u, err
}

// PrintUsage writes rows as a table.
func PrintUsage(w io.Writer, rows []UsageRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "START\tRULE\tALLOWED\tDENIED\tSHADOW-DENIED\tDEGRADED\tSHED\tUNITS\t")
	n := strconv.FormatInt
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Start.UTC().Format(time.RFC3339), r.Rule,
			n(r.Allowed, 10), n(r.Denied, 10), n(r.ShadowDenied, 10), n(r.Degraded, 10), n(r.Shed, 10), n(r.Units, 10))
	}
	tw.Flush()
}

// TopSubjects and TopSubject are a tenant's heaviest subjects as the server
// answers them.
type (
	TopSubjects = adminapi.TopSubjects
	TopSubject  = adminapi.TopSubject
)

// TopQuery selects a tenant's heaviest subjects: Rule ("" every rule), By
// ("denied" or "units"; "" denied), From and To (zero: the last hour up to
// now), Limit (0: the server's default, 20).
type TopQuery struct {
	Rule, By string
	From, To time.Time
	Limit    int
}

// TopSubjects reads a tenant's heaviest subjects.
func (a *Admin) TopSubjects(ctx context.Context, tenant string, q TopQuery) (TopSubjects, error) {
	v := UsageQuery{Rule: q.Rule, From: q.From, To: q.To}.values()
	if q.By != "" {
		v.Set("by", q.By)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var t TopSubjects
	err := a.doQuery(ctx, http.MethodGet, []string{"tenants", tenant, "usage", "top"}, v, nil, &t)
	return t, err
}

// PrintTopSubjects writes subjects as a table.
func PrintTopSubjects(w io.Writer, subjects []TopSubject) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSUBJECT\tDENIED\tUNITS")
	for _, s := range subjects {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", s.Rule, s.Subject, s.Denied, s.Units)
	}
	tw.Flush()
}
