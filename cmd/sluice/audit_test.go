package main

import (
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// sluice audit reads the same log through the admin API and from the
// database, in every output format; changes made on the database directly
// are the operator's.
func TestAuditCommand(t *testing.T) {
	s := startServer(t)
	s.mustRunIn(t, "database", "tenant", "create", "acme")
	s.mustRunIn(t, "server", "tenant", "create", "beta")
	s.mustRunIn(t, "server", "rule", "set", "beta", "orders", "--route", "/api/orders*", "--fixed-window", "5/1m")
	s.mustRunIn(t, "server", "rule", "set", "beta", "orders", "--route", "/api/orders*", "--fixed-window", "10/1m")

	var pages [2]string
	for i, mode := range modes {
		out := s.mustRunIn(t, mode, "audit", "-o", "json")
		var page struct {
			Entries []struct {
				Actor, Action, Target string
				Tenant                *string
				Before, After         map[string]any
			}
			NextBefore *int64 `json:"next_before"`
		}
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatalf("%s mode: -o json: %v\n%s", mode, err, out)
		}
		var got []string
		for _, e := range page.Entries {
			got = append(got, e.Actor+" "+e.Action+" "+e.Target)
		}
		want := []string{"operator rule.replace orders", "operator rule.create orders", "operator tenant.create beta",
			"operator tenant.create acme", "system admin_token.set admin_token"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s mode: entries\n%s\nwant\n%s", mode, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if len(page.Entries) > 0 && page.Entries[0].Before["limits"] == nil {
			t.Errorf("%s mode: rule.replace has no rule before: %s", mode, out)
		}
		pages[i] = out
	}
	if pages[0] != pages[1] {
		t.Errorf("the database and the server disagree:\n%s\n%s", pages[0], pages[1])
	}

	table := s.mustRunIn(t, "server", "audit", "--tenant", "beta", "--action", "rule.create")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "rule.create") || !strings.Contains(lines[1], "beta") {
		t.Errorf("table of beta's rule.create:\n%s", table)
	}
	out, errOut, err := s.runIn(t, "database", "audit", "--limit", "2")
	if err != nil || !strings.Contains(errOut, "--before ") || strings.Count(out, "\n") != 3 {
		t.Errorf("a full page: %v\n%s\n%s", err, out, errOut)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(s.mustRunIn(t, "server", "audit", "--limit", "1", "-o", "yaml")), &doc); err != nil {
		t.Fatal(err)
	}
	entry := doc["entries"].([]any)[0].(map[string]any)
	if before, ok := entry["before"].(map[string]any); !ok || before["name"] != "orders" {
		t.Errorf("-o yaml: before is %#v; want the rule as YAML", entry["before"])
	}
	for _, bad := range [][]string{{"audit", "--since", "yesterday"}, {"audit", "--limit", "0"}} {
		for _, mode := range modes {
			if _, _, err := s.runIn(t, mode, bad...); err == nil {
				t.Errorf("%s mode: sluice %s succeeded", mode, strings.Join(bad, " "))
			}
		}
	}
}
