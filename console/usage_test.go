package console_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/usage"
)

// TestUsageGapsShow: minutes an instance dropped are breaks in the usage
// chart (null in every series) and a warning on the page, not quiet
// minutes; the minutes around them keep their counts.
func TestUsageGapsShow(t *testing.T) {
	s := newStack(t)
	b := s.browser()
	b.signIn(adminToken)
	if p := b.post("/console/tenants", map[string][]string{"name": {"acme"}}); p.status >= 400 {
		t.Fatalf("create tenant: %d %s", p.status, p.body)
	}
	acme, err := s.catalog.Tenant(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	ns := acme.CounterNamespace()
	now := time.Now().UTC().Truncate(time.Minute)
	gapFrom := now.Add(-20 * time.Minute)
	if err := s.catalog.WriteUsage(t.Context(), usage.Batch{Instance: "i1",
		Rows: []usage.Row{
			{Namespace: ns, Rule: "api", Start: gapFrom.Add(-time.Minute), Allowed: 4},
			{Namespace: ns, Rule: "api", Start: gapFrom.Add(3 * time.Minute), Allowed: 6, Denied: 1},
		},
		Gaps: []usage.Gap{{Namespace: ns, Rule: "api", From: gapFrom, To: gapFrom.Add(3 * time.Minute)}},
	}); err != nil {
		t.Fatal(err)
	}
	p := b.get("/console/tenants/acme/usage.json?range=1h")
	var d struct {
		Times   []int64
		Allowed []*int64
		Denied  []*int64
	}
	if p.status != http.StatusOK || json.Unmarshal([]byte(p.body), &d) != nil {
		t.Fatalf("usage.json: %d %s", p.status, p.body)
	}
	var nulls, allowed int64
	for i, at := range d.Times {
		switch {
		case d.Allowed[i] == nil:
			nulls++
			if start := time.Unix(at, 0); start.Before(gapFrom) || !start.Before(gapFrom.Add(3*time.Minute)) {
				t.Errorf("minute %s is null outside the gap", start.UTC())
			}
			if d.Denied[i] != nil {
				t.Errorf("minute %d: allowed is null, denied is not", at)
			}
		default:
			allowed += *d.Allowed[i]
		}
	}
	if nulls != 3 || allowed != 10 {
		t.Errorf("%d null minutes and %d allowed; want the gap's 3 and the 10 around it", nulls, allowed)
	}
	page := b.get("/console/tenants/acme/usage?range=1h")
	if !strings.Contains(page.body, `id="usage-gaps"`) || !strings.Contains(page.body, gapFrom.Format("2006-01-02 15:04")) {
		t.Errorf("the page does not warn of the gap:\n%s", page.body)
	}
}
