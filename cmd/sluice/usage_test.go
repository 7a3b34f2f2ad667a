package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/sqlite"
	"github.com/sluicelabs/sluice/usage"
)

// sluice usage reads the same history through the admin API and from the
// database, as a table, JSON and CSV, and refuses a bad step or time.
func TestUsageCommand(t *testing.T) {
	s := startServer(t)
	s.mustRunIn(t, "database", "tenant", "create", "acme")
	c, err := sqlite.Open(t.Context(), strings.TrimPrefix(s.database, "sqlite://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	acme, err := c.Tenant(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	minute := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	if err := c.AddUsage(t.Context(), []usage.Row{
		{Namespace: acme.CounterNamespace(), Rule: "api", Start: minute, Allowed: 7, Denied: 3, Units: 14},
		{Namespace: acme.CounterNamespace(), Rule: "api", Start: minute.Add(time.Minute), Allowed: 1, Units: 2},
		{Namespace: acme.CounterNamespace(), Rule: "other", Start: minute, Shed: 2},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteUsage(t.Context(), usage.Batch{Instance: "i1", Top: []usage.TopRow{
		{Namespace: acme.CounterNamespace(), Rule: "api", Hour: minute.Truncate(time.Hour), Subject: "mallory", Denied: 3, Units: 14},
		{Namespace: acme.CounterNamespace(), Rule: "api", Hour: minute.Truncate(time.Hour), Subject: "bob", Units: 2},
	}}); err != nil {
		t.Fatal(err)
	}
	var tops [2]string
	for i, mode := range modes {
		tops[i] = s.mustRunIn(t, mode, "usage", "acme", "--top", "units", "-o", "json")
	}
	if tops[0] != tops[1] || !strings.Contains(tops[0], `"subject": "mallory"`) || strings.Index(tops[0], "mallory") > strings.Index(tops[0], "bob") {
		t.Errorf("--top units from the database and the server:\n%s\n%s", tops[0], tops[1])
	}
	if got := s.mustRunIn(t, "server", "usage", "acme", "--top", "denied", "--csv"); got != "rule,subject,denied,units\napi,mallory,3,14\n" {
		t.Errorf("--top denied --csv: %q", got)
	}
	var outs [2]string
	for i, mode := range modes {
		outs[i] = s.mustRunIn(t, mode, "usage", "acme", "--rule", "api", "--step", "hour", "-o", "json")
	}
	if outs[0] != outs[1] {
		t.Errorf("the database and the server disagree:\n%s\n%s", outs[0], outs[1])
	}
	hour := minute.Truncate(time.Hour)
	if !strings.Contains(outs[0], `"allowed": 8`) || !strings.Contains(outs[0], `"units": 16`) ||
		!strings.Contains(outs[0], hour.Format(time.RFC3339)) || strings.Contains(outs[0], "other") {
		t.Errorf("the hour of api: %s", outs[0])
	}
	table := s.mustRunIn(t, "server", "usage", "acme", "--from", "10m")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 4 || !strings.Contains(lines[0], "DENIED") {
		t.Errorf("a table of three minutes:\n%s", table)
	}
	csv := s.mustRunIn(t, "database", "usage", "acme", "--rule", "other", "--csv")
	if want := "start,rule,allowed,denied,shadow_denied,degraded,shed,units\n" + minute.Format(time.RFC3339) + ",other,0,0,0,0,2,0\n"; csv != want {
		t.Errorf("--csv: %q, want %q", csv, want)
	}
	for _, bad := range [][]string{{"usage", "acme", "--step", "week"}, {"usage", "acme", "--from", "yesterday"}, {"usage", "nobody"},
		{"usage", "acme", "--top", "errors"}, {"usage", "acme", "--top", "units", "--limit", "0"}} {
		for _, mode := range modes {
			if _, _, err := s.runIn(t, mode, bad...); err == nil {
				t.Errorf("%s mode: sluice %s succeeded", mode, strings.Join(bad, " "))
			}
		}
	}
}
