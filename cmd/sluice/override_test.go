package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// overridesFile is a catalog file with plans and overrides, as export
// writes it.
const overridesFile = `tenants:
    - name: acme
      rules:
        - name: search
          route: /v1/search*
          limits:
            - name: minute
              algorithm: sliding_window
              limit: 100
              window: 1m
          plans:
            free:
                - name: minute
                  algorithm: sliding_window
                  limit: 100
                  window: 1m
            pro:
                - name: minute
                  algorithm: sliding_window
                  limit: 1000
                  window: 1m
          overrides:
            - name: launch-week
              subjects:
                - cust-17
              limits:
                - name: minute
                  algorithm: sliding_window
                  limit: 10000
                  window: 1m
              expires_at: "2099-12-09T00:00:00Z"
            - name: partners
              subjects:
                - partner-*
              limits:
                - name: minute
                  algorithm: sliding_window
                  limit: 5000
                  window: 1m
`

// TestApplyExportRoundTripOfPlansAndOverrides: plans and overrides written
// by the CLI export as the file above; applied to an empty catalog they
// export the same, on SQLite, PostgreSQL and through a server, and a
// second apply changes nothing.
func TestApplyExportRoundTripOfPlansAndOverrides(t *testing.T) {
	for _, target := range catalogTargets {
		t.Run(target.name, func(t *testing.T) {
			src := target.flags(t)
			for _, args := range [][]string{
				{"tenant", "create", "acme"},
				{"rule", "set", "acme", "search", "--route", "/v1/search*", "--sliding-window", "minute=100/1m",
					"--plan", "free:sliding-window:minute=100/1m", "--plan", "pro:sliding-window:minute=1000/1m"},
				{"override", "set", "acme", "search", "launch-week", "--subject", "cust-17", "--sliding-window", "minute=10000/1m", "--expires-at", "2099-12-09T00:00:00Z"},
				{"override", "set", "acme", "search", "partners", "--subject", "partner-*", "--sliding-window", "minute=5000/1m"},
			} {
				mustRun(t, src, args...)
			}
			if out := mustRun(t, src, "override", "list", "acme", "search"); !strings.Contains(out, "launch-week") || !strings.Contains(out, "2099-12-09T00:00:00Z") || !strings.Contains(out, "never") {
				t.Errorf("override list:\n%s", out)
			}
			first := mustRun(t, src, "export")
			if first != overridesFile {
				t.Fatalf("export:\n%s\nwant:\n%s", first, overridesFile)
			}
			file := filepath.Join(t.TempDir(), "catalog.yaml")
			if err := os.WriteFile(file, []byte(first), 0o600); err != nil {
				t.Fatal(err)
			}
			dst := target.flags(t)
			if out := mustRun(t, dst, "apply", "-f", file); !strings.Contains(out, "Applied 4 changes.") {
				t.Errorf("apply printed:\n%s", out)
			}
			if again := mustRun(t, dst, "export"); again != first {
				t.Errorf("export after apply:\n%s\nwant:\n%s", again, first)
			}
			if out := mustRun(t, dst, "apply", "-f", file, "--prune"); out != "No changes: the catalog matches the file.\n" {
				t.Errorf("second apply printed %q", out)
			}

			// --prune drops an override the file no longer lists, before
			// anything else.
			fewer := strings.Split(first, "            - name: partners")[0]
			if err := os.WriteFile(file, []byte(fewer), 0o600); err != nil {
				t.Fatal(err)
			}
			if out := mustRun(t, dst, "apply", "-f", file, "--prune"); !strings.Contains(out, "- override acme/search/partners") || !strings.Contains(out, "Applied 1 changes.") {
				t.Errorf("prune printed:\n%s", out)
			}
			mustRun(t, dst, "override", "delete", "acme", "search", "launch-week")
			if out := mustRun(t, dst, "override", "list", "acme", "search"); strings.Contains(out, "launch-week") {
				t.Errorf("after delete, list:\n%s", out)
			}
		})
	}
}

func TestOverrideSetRefusesBadInputAndChangesNothing(t *testing.T) {
	db := catalogTargets[0].flags(t)
	mustRun(t, db, "tenant", "create", "acme")
	mustRun(t, db, "rule", "set", "acme", "search", "--route", "/v1/search*", "--sliding-window", "minute=100/1m")
	before := mustRun(t, db, "export")
	for name, c := range map[string]struct {
		args []string
		says string
	}{
		"past":           {[]string{"--subject", "a", "--sliding-window", "minute=5/1m", "--expires-at", "2001-01-01T00:00:00Z"}, "in the past"},
		"malformed":      {[]string{"--subject", "a", "--sliding-window", "minute=5/1m", "--expires-at", "tomorrow"}, "RFC 3339"},
		"no_subject":     {[]string{"--sliding-window", "minute=5/1m"}, "--subject is required"},
		"unknown_limit":  {[]string{"--subject", "a", "--sliding-window", "hour=5/1h"}, `no limit named "hour"`},
		"both_expiries":  {[]string{"--subject", "a", "--sliding-window", "minute=5/1m", "--for", "1d", "--expires-at", "2099-01-01T00:00:00Z"}, "not both"},
		"no_such_rule":   {[]string{"--subject", "a", "--sliding-window", "minute=5/1m"}, "not found"},
		"bad_plan_value": {nil, "PLAN:KIND:SPEC"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"override", "set", "acme", "search", "o"}, c.args...)
			switch name {
			case "no_such_rule":
				args[3] = "nope"
			case "bad_plan_value":
				args = []string{"rule", "set", "acme", "search", "--route", "/v1/search*", "--sliding-window", "minute=100/1m", "--plan", "pro"}
			}
			out, errOut, err := runCLI(t, append(args, db...)...)
			if err == nil || !strings.Contains(out+errOut+err.Error(), c.says) {
				t.Errorf("sluice %s: err %v, output %s%s; want an error saying %q", strings.Join(args, " "), err, out, errOut, c.says)
			}
		})
	}
	if after := mustRun(t, db, "export"); after != before {
		t.Errorf("refused commands changed the catalog:\n%s", after)
	}
}
