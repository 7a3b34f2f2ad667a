package client_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// lines splits a table into its lines, each with its columns.
func lines(s string) [][]string {
	var out [][]string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.Fields(l))
	}
	return out
}

func TestTables(t *testing.T) {
	created := time.Date(2026, 12, 1, 17, 0, 0, 0, time.FixedZone("CET", 3600))
	revoked := created.Add(time.Hour)
	for name, c := range map[string]struct {
		print func(*strings.Builder)
		want  [][]string
	}{
		"tenants": {func(b *strings.Builder) {
			client.PrintTenants(b, []sluice.Tenant{{Name: "acme", Status: sluice.TenantActive, CreatedAt: created}})
		}, [][]string{{"NAME", "STATUS", "CREATED"}, {"acme", "active", "2026-12-01T16:00:00Z"}}},
		"keys": {func(b *strings.Builder) {
			client.PrintKeys(b, []sluice.APIKey{
				{ID: "key_a", Name: "web", Role: sluice.RoleCheck, CreatedAt: created},
				{ID: "key_b", Name: "ops", Role: sluice.RoleAdmin, CreatedAt: created, RevokedAt: &revoked},
			})
		}, [][]string{{"ID", "NAME", "ROLE", "CREATED", "REVOKED"},
			{"key_a", "web", "check", "2026-12-01T16:00:00Z", "-"},
			{"key_b", "ops", "admin", "2026-12-01T16:00:00Z", "2026-12-01T17:00:00Z"}}},
		"audit": {func(b *strings.Builder) {
			tenant := "acme"
			client.PrintAudit(b, []client.AuditEntry{{ID: 7, Time: created, Actor: "operator", Tenant: &tenant, Action: "tenant.create", Target: "acme"},
				{ID: 8, Time: created, Actor: "system", Action: "admin_token.set", Target: "operator"}})
		}, [][]string{{"ID", "TIME", "ACTOR", "TENANT", "ACTION", "TARGET"},
			{"7", "2026-12-01T16:00:00Z", "operator", "acme", "tenant.create", "acme"},
			{"8", "2026-12-01T16:00:00Z", "system", "-", "admin_token.set", "operator"}}},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			c.print(&b)
			if got := lines(b.String()); !equalLines(got, c.want) {
				t.Fatalf("got\n%s\nwant %q", b.String(), c.want)
			}
		})
	}
	t.Run("rules", func(t *testing.T) {
		var b strings.Builder
		client.PrintRules(&b, []sluice.Rule{{Name: "api", Route: "/api*", Limits: []sluice.Limit{sluice.TokenBucket(10, 2), sluice.SlidingWindow(600, time.Minute)}}})
		out := b.String()
		for _, want := range []string{"FAILURE MODE", "api", "/api*", sluice.TokenBucket(10, 2).String() + "; " + sluice.SlidingWindow(600, time.Minute).String(), "false"} {
			if !strings.Contains(out, want) {
				t.Errorf("rules table lacks %q:\n%s", want, out)
			}
		}
	})
}

func equalLines(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], "|") != strings.Join(b[i], "|") {
			return false
		}
	}
	return true
}

func TestPrintDecision(t *testing.T) {
	for name, c := range map[string]struct {
		res  client.Result
		want []string
	}{
		"no_rule": {client.Result{Decision: sluice.Decision{Allowed: true}}, []string{"Allowed: no rule matches /api/x, so nothing was counted."}},
		"allowed": {client.Result{Rule: "orders", Decision: sluice.Decision{Allowed: true, Limit: 2, Remaining: 1,
			Limits: []sluice.LimitDecision{{Name: "minute", Algorithm: sluice.AlgorithmFixedWindow, Limit: 2, Remaining: 1, ResetAfter: 59_500 * time.Millisecond}}}},
			[]string{"Allowed by rule orders: 1 of 2 remaining.", "LIMIT", "minute", "fixed_window", "59.5s", "-"}},
		"denied_shadow_degraded": {client.Result{Rule: "orders", Shadow: true, Decision: sluice.Decision{RetryAfter: 1500 * time.Millisecond, Degraded: true}},
			[]string{"Denied by rule orders: retry after 1.5s.", "shadow mode", "Degraded"}},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			client.PrintDecision(&b, "/api/x", c.res)
			for _, want := range c.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

func TestNewAuditPage(t *testing.T) {
	at := time.Date(2026, 12, 1, 17, 0, 0, 0, time.FixedZone("CET", 3600))
	entries := []sluice.AuditEntry{
		{ID: 9, Time: at, Actor: "operator", Tenant: "acme", Action: "rule.replace", Target: "api",
			Before: json.RawMessage(`{"route":"/a"}`), After: json.RawMessage(`{"route":"/b"}`)},
		{ID: 8, Time: at, Actor: "system", Action: "admin_token.set", Target: "operator"},
	}
	page, err := client.NewAuditPage(entries, 2)
	if err != nil {
		t.Fatal(err)
	}
	e := page.Entries[0]
	if len(page.Entries) != 2 || *e.Tenant != "acme" || e.Before.(map[string]any)["route"] != "/a" || !e.Time.Equal(at) || e.Time.Location() != time.UTC {
		t.Fatalf("entry %+v", e)
	}
	if page.Entries[1].Tenant != nil || page.Entries[1].Before != nil {
		t.Fatalf("an entry of no tenant, with no document: %+v", page.Entries[1])
	}
	if page.NextBefore == nil || *page.NextBefore != 8 {
		t.Fatalf("a full page must name the next: %v", page.NextBefore)
	}
	if page, _ := client.NewAuditPage(entries, 3); page.NextBefore != nil {
		t.Fatal("a short page has no next")
	}
	if _, err := client.NewAuditPage([]sluice.AuditEntry{{ID: 1, After: json.RawMessage(`{`)}}, 10); err == nil || !strings.Contains(err.Error(), "audit entry 1") {
		t.Fatalf("invalid JSON: %v", err)
	}
}

func TestParseAuditTime(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for s, want := range map[string]time.Time{
		"":                     {},
		"24h":                  now.Add(-24 * time.Hour),
		"0s":                   now,
		"2026-12-01T17:00:00Z": time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC),
	} {
		if got, err := client.ParseAuditTime("--since", s, now); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"-1h", "yesterday", "2026-12-01"} {
		if _, err := client.ParseAuditTime("--since", s, now); err == nil || !strings.HasPrefix(err.Error(), "--since ") {
			t.Errorf("%q: %v, want an error naming --since", s, err)
		}
	}
}
