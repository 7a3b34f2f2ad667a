package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRuleSetKeepsPlans: rule set without --plan keeps an existing rule's
// plans (a retuned limit must not break checks naming a plan), --plan
// replaces them, --no-plans removes them, and both together are refused,
// changing nothing; on SQLite, PostgreSQL and through a server.
func TestRuleSetKeepsPlans(t *testing.T) {
	for _, target := range catalogTargets {
		t.Run(target.name, func(t *testing.T) {
			flags := target.flags(t)
			plans := func() map[string]any {
				t.Helper()
				var r map[string]any
				if err := json.Unmarshal([]byte(mustRun(t, flags, "rule", "get", "acme", "search", "-o", "json")), &r); err != nil {
					t.Fatal(err)
				}
				p, _ := r["plans"].(map[string]any)
				return p
			}
			set := func(extra ...string) (string, error) {
				args := append([]string{"rule", "set", "acme", "search", "--route", "/v1/search*"}, extra...)
				out, errOut, err := runCLI(t, append(args, flags...)...)
				return out + errOut, err
			}
			mustRun(t, flags, "tenant", "create", "acme")
			if out, err := set("--sliding-window", "minute=100/1m", "--plan", "free:sliding-window:minute=10/1m", "--plan", "pro:sliding-window:minute=1000/1m"); err != nil {
				t.Fatalf("rule set with plans: %v\n%s", err, out)
			}

			if out, err := set("--sliding-window", "minute=200/1m"); err != nil {
				t.Fatalf("rule set without --plan: %v\n%s", err, out)
			}
			if p := plans(); len(p) != 2 || p["free"] == nil || p["pro"] == nil {
				t.Errorf("rule set without --plan left plans %v; want free and pro kept", p)
			}
			if out := mustRun(t, flags, "rule", "get", "acme", "search", "-o", "json"); !strings.Contains(out, `"limit": 200`) {
				t.Errorf("the new limit was not stored:\n%s", out)
			}

			before := mustRun(t, flags, "export")
			out, err := set("--sliding-window", "minute=100/1m", "--plan", "gold:sliding-window:minute=5/1m", "--no-plans")
			if err == nil || !strings.Contains(err.Error(), "--plan and --no-plans together") {
				t.Errorf("--plan with --no-plans: err %v\n%s; want a refusal naming both", err, out)
			}
			if after := mustRun(t, flags, "export"); after != before {
				t.Errorf("the refused rule set changed the catalog:\n%s", after)
			}

			if out, err := set("--sliding-window", "minute=100/1m", "--plan", "gold:sliding-window:minute=5/1m"); err != nil {
				t.Fatalf("rule set --plan: %v\n%s", err, out)
			}
			if p := plans(); len(p) != 1 || p["gold"] == nil {
				t.Errorf("rule set --plan gold left plans %v; want gold alone", p)
			}

			if out, err := set("--sliding-window", "minute=100/1m", "--no-plans"); err != nil {
				t.Fatalf("rule set --no-plans: %v\n%s", err, out)
			}
			if p := plans(); len(p) != 0 {
				t.Errorf("rule set --no-plans left plans %v", p)
			}
			// A new rule has no plans to keep.
			if out, _, err := runCLI(t, append([]string{"rule", "set", "acme", "fresh", "--route", "/fresh", "--fixed-window", "5/1m"}, flags...)...); err != nil {
				t.Fatalf("rule set of a new rule: %v\n%s", err, out)
			}
		})
	}
}
