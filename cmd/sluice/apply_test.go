package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// catalogTarget is somewhere a catalog lives, and the flags that reach it.
type catalogTarget struct {
	name  string
	flags func(t *testing.T) []string // a fresh, empty catalog each call
}

var catalogTargets = []catalogTarget{
	{"sqlite", func(t *testing.T) []string {
		return []string{"--database", "sqlite://" + filepath.Join(t.TempDir(), "catalog.db")}
	}},
	{"postgres", func(t *testing.T) []string {
		return []string{"--database", testenv.Postgres(t)}
	}},
	{"server", func(t *testing.T) []string {
		return []string{"--server", startServer(t).url, "--token", testToken}
	}},
}

func mustRun(t *testing.T, flags []string, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, append(args, flags...)...)
	if err != nil {
		t.Fatalf("sluice %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// exported is what sluice export writes of the catalog the round trip
// starts from, the same whichever catalog holds it.
const exported = `tenants:
    - name: acme
      keys:
        - name: ops
          role: admin
        - name: web
          role: check
      rules:
        - name: all
          route: '*'
          limits:
            - name: weekly
              algorithm: fixed_window
              limit: 1000
              window: 168h
        - name: orders
          route: /api/orders*
          limits:
            - name: burst
              algorithm: token_bucket
              capacity: 100
              refill_per_second: 10
            - name: daily
              algorithm: sliding_window
              limit: 5000
              window: 24h
          failure_mode: open
          shadow: true
    - name: beta
      status: suspended
      rules:
        - name: x
          route: /x
          limits:
            - name: token_bucket
              algorithm: token_bucket
              capacity: 5
              refill_per_second: 1
          failure_mode: local
    - name: empty
`

// TestApplyExportRoundTrip: a catalog written with the CLI's commands,
// exported, applied to an empty catalog and exported again reads the same,
// on SQLite, PostgreSQL and through a server; applying it again changes
// nothing.
func TestApplyExportRoundTrip(t *testing.T) {
	for _, target := range catalogTargets {
		t.Run(target.name, func(t *testing.T) {
			src := target.flags(t)
			for _, args := range [][]string{
				{"tenant", "create", "acme"},
				{"key", "create", "acme", "--role", "check", "--name", "web"},
				{"key", "create", "acme", "--role", "admin", "--name", "ops"},
				{"key", "create", "acme", "--role", "check", "--name", "gone"},
				{"key", "revoke", "acme", "gone"},
				{"rule", "set", "acme", "orders", "--route", "/api/orders*", "--token-bucket", "burst=100:10/s", "--sliding-window", "daily=5000/1d", "--failure-mode", "open", "--shadow"},
				{"rule", "set", "acme", "all", "--route", "*", "--fixed-window", "weekly=1000/1w"},
				{"tenant", "create", "beta"},
				{"tenant", "suspend", "beta"},
				{"rule", "set", "beta", "x", "--route", "/x", "--token-bucket", "5:1/s", "--failure-mode", "local"},
				{"tenant", "create", "empty"},
			} {
				mustRun(t, src, args...)
			}
			first := mustRun(t, src, "export")
			if first != exported {
				t.Fatalf("export:\n%s\nwant:\n%s", first, exported)
			}
			file := filepath.Join(t.TempDir(), "catalog.yaml")
			if err := os.WriteFile(file, []byte(first), 0o600); err != nil {
				t.Fatal(err)
			}

			dst := target.flags(t)
			out := mustRun(t, dst, "apply", "-f", file)
			if !strings.Contains(out, "Applied 9 changes.") || strings.Count(out, "its secret, shown only this once: sk_") != 2 {
				t.Errorf("apply printed:\n%s", out)
			}
			if again := mustRun(t, dst, "export"); again != first {
				t.Errorf("export after apply:\n%s\nwant:\n%s", again, first)
			}
			if out := mustRun(t, dst, "apply", "-f", file, "--prune"); out != "No changes: the catalog matches the file.\n" {
				t.Errorf("second apply printed %q", out)
			}
			if again := mustRun(t, dst, "export"); again != first {
				t.Errorf("export after a second apply:\n%s", again)
			}
		})
	}
}

// TestApplyDryRunAndPrune: --dry-run prints the changes and makes none;
// --prune deletes the rules and tenants, and revokes the keys, the file no
// longer lists; keys created by apply work.
func TestApplyDryRunAndPrune(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			// A server of its own: --prune deletes every tenant the file
			// leaves out.
			s := startServer(t)
			var flags []string
			if mode == "database" {
				flags = []string{"--database", s.database}
			} else {
				flags = []string{"--server", s.url, "--token", testToken}
			}
			tenant := map[string]string{"database": "acme", "server": "beta"}[mode]
			dir := t.TempDir()
			write := func(name, body string) string {
				path := filepath.Join(dir, name)
				if err := os.WriteFile(path, []byte(strings.ReplaceAll(body, "TENANT", tenant)), 0o600); err != nil {
					t.Fatal(err)
				}
				return path
			}
			v1 := write("v1.yaml", `tenants:
  - name: TENANT
    keys: [{name: web, role: check}, {name: old, role: check}]
    rules:
      - {name: orders, route: /api/orders*, limits: [{name: hourly, algorithm: fixed_window, limit: 1, window: 1h}]}
      - {name: legacy, route: /legacy, limits: [{algorithm: token_bucket, capacity: 5, refill_per_second: 1}]}
  - name: TENANT-tmp
`)
			out := mustRun(t, flags, "apply", "-f", v1)
			secret := regexp.MustCompile(`Created key \S+ \(name web\) of tenant \S+; its secret, shown only this once: (\S+)`).FindStringSubmatch(out)
			if secret == nil {
				t.Fatalf("apply printed no secret for key web:\n%s", out)
			}
			// The secret printed is the key's: the server allows a check with
			// it, once the catalog's change feed has brought it the key (within
			// a second) when it was written to the database directly.
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, errOut, err := runCLI(t, "check", "--server", s.url, "--api-key", secret[1], "--route", "/api/orders/1", "--fail-on-deny")
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), "401") || time.Now().After(deadline) {
					t.Fatalf("check with the created key: %v\n%s", err, errOut)
				}
				time.Sleep(20 * time.Millisecond)
			}
			before := mustRun(t, flags, "export")

			v2 := write("v2.yaml", `tenants:
  - name: TENANT
    status: suspended
    keys: [{name: web, role: check}]
    rules:
      - {name: orders, route: /api/orders*, failure_mode: open, limits: [{name: hourly, algorithm: fixed_window, limit: 2, window: 1h}]}
`)
			out = mustRun(t, flags, "apply", "-f", v2, "--prune", "--dry-run")
			for _, want := range []string{
				"~ tenant TENANT: status active -> suspended\n",
				"~ rule TENANT/orders: route /api/orders*; hourly: 2 per fixed 1h; failure mode: open\n    was: route /api/orders*; hourly: 1 per fixed 1h; failure mode: the server's default\n",
				"- rule TENANT/legacy\n",
				"- key TENANT/old (",
				"- tenant TENANT-tmp (with its 0 keys and 0 rules)\n",
				"Dry run: 5 changes not applied.\n",
			} {
				if want = strings.ReplaceAll(want, "TENANT", tenant); !strings.Contains(out, want) {
					t.Errorf("dry run printed:\n%s\nwant it to contain %q", out, want)
				}
			}
			if after := mustRun(t, flags, "export"); after != before {
				t.Errorf("a dry run changed the catalog:\n%s\nwas:\n%s", after, before)
			}

			// Without --prune, what the file leaves out stays.
			mustRun(t, flags, "apply", "-f", v2)
			if keys := mustRun(t, flags, "key", "list", tenant); !strings.Contains(keys, " old ") {
				t.Errorf("apply without --prune revoked a key:\n%s", keys)
			}
			mustRun(t, flags, "apply", "-f", v2, "--prune", "--yes")
			got := mustRun(t, flags, "export")
			want := strings.ReplaceAll(`tenants:
    - name: TENANT
      status: suspended
      keys:
        - name: web
          role: check
      rules:
        - name: orders
          route: /api/orders*
          limits:
            - name: hourly
              algorithm: fixed_window
              limit: 2
              window: 1h
          failure_mode: open
`, "TENANT", tenant)
			if got != want {
				t.Errorf("export after --prune:\n%s\nwant it to hold:\n%s", got, want)
			}
		})
	}
}

// TestApplyRefusesABadFileAndChangesNothing: an error names the file, the
// entry and the field, and nothing is written.
func TestApplyRefusesABadFileAndChangesNothing(t *testing.T) {
	flags := []string{"--database", "sqlite://" + filepath.Join(t.TempDir(), "catalog.db")}
	mustRun(t, flags, "tenant", "create", "acme")
	mustRun(t, flags, "key", "create", "acme", "--role", "check", "--name", "web")
	before := mustRun(t, flags, "export")
	dir := t.TempDir()
	for _, c := range []struct{ name, body, want string }{
		{"unknown_field", "tenants: [{name: acme, colour: blue}]", "bad.yaml: yaml: unmarshal errors:\n  line 1: field colour not found"},
		{"bad_tenant_name", "tenants: [{name: Acme}]", "bad.yaml: tenants[0].name: "},
		{"bad_status", "tenants: [{name: acme, status: paused}]", `bad.yaml: tenants[0] (acme).status: "paused" is not a status`},
		{"tenant_twice", "tenants: [{name: acme}, {name: acme}]", "bad.yaml: tenants[1] (acme).name: tenant acme is listed twice"},
		{"bad_role", "tenants: [{name: acme, keys: [{name: web, role: root}]}]", "bad.yaml: tenants[0] (acme).keys[0] (web).role: "},
		{"bad_window", "tenants: [{name: acme, rules: [{name: r, route: /r, limits: [{algorithm: fixed_window, limit: 5, window: 1y}]}]}]",
			`bad.yaml: tenants[0] (acme).rules[0] (r).limits[0]: Limit "fixed_window": window "1y" is not a duration`},
		{"no_limits", "tenants: [{name: acme, rules: [{name: r, route: /r}]}]", "bad.yaml: tenants[0] (acme).rules[0] (r).limits: a rule needs at least one limit"},
		{"bad_route", "tenants: [{name: acme, rules: [{name: r, route: r, limits: [{algorithm: token_bucket, capacity: 1, refill_per_second: 1}]}]}]", "bad.yaml: tenants[0] (acme).rules[0] (r).route: "},
		{"bad_failure_mode", "tenants: [{name: acme, rules: [{name: r, route: /r, failure_mode: maybe, limits: [{algorithm: token_bucket, capacity: 1, refill_per_second: 1}]}]}]",
			`bad.yaml: tenants[0] (acme).rules[0] (r).failure_mode: "maybe" is not a failure mode`},
		{"route_twice", "tenants: [{name: acme, rules: [{name: a, route: /r, limits: [{algorithm: token_bucket, capacity: 1, refill_per_second: 1}]}, {name: b, route: /r, limits: [{algorithm: token_bucket, capacity: 1, refill_per_second: 1}]}]}]",
			"bad.yaml: tenants[0] (acme).rules[1] (b).route: rule a already uses route /r"},
		{"role_change", "tenants: [{name: beta}, {name: acme, keys: [{name: web, role: admin}]}]", "key web of tenant acme has role check, the file says admin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.yaml")
			if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := runCLI(t, append([]string{"apply", "-f", path}, flags...)...)
			if err == nil || !strings.Contains(strings.ReplaceAll(err.Error(), path, "bad.yaml"), c.want) {
				t.Errorf("apply: %v\nwant an error containing %q", err, c.want)
			}
			if after := mustRun(t, flags, "export"); after != before {
				t.Errorf("a refused file changed the catalog:\n%s", after)
			}
		})
	}
}

// TestApplyPruneOfAnEmptyFileDeletesNothing: a zero-byte file (what a failed
// "sluice export > catalog.yaml" leaves), a file of comments, a truncated
// file and a file listing no tenant are refused, even with --prune --yes,
// and the catalog is left as it was.
func TestApplyPruneOfAnEmptyFileDeletesNothing(t *testing.T) {
	for _, target := range catalogTargets {
		t.Run(target.name, func(t *testing.T) {
			flags := target.flags(t)
			for _, args := range [][]string{
				{"tenant", "create", "acme"},
				{"key", "create", "acme", "--role", "check", "--name", "web"},
				{"rule", "set", "acme", "orders", "--route", "/api/orders*", "--token-bucket", "burst=100:10/s"},
				{"tenant", "create", "beta"},
			} {
				mustRun(t, flags, args...)
			}
			before := mustRun(t, flags, "export")
			dir := t.TempDir()
			for _, c := range []struct{ name, body, want string }{
				{"zero_bytes", "", "the file is empty"},
				{"comments_only", "# catalog\n\n", "the file is empty"},
				{"truncated", "tenants:\n  - name: acme\n    keys: [{name: web", "yaml:"},
				{"no_tenant", "tenants: []\n", "lists no tenant"},
			} {
				t.Run(c.name, func(t *testing.T) {
					path := filepath.Join(dir, c.name+".yaml")
					if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
						t.Fatal(err)
					}
					out, _, err := runCLI(t, append([]string{"apply", "-f", path, "--prune", "--yes"}, flags...)...)
					if err == nil || !strings.Contains(err.Error(), c.want) {
						t.Errorf("apply --prune of %q: %v (printed %q); want an error containing %q", c.body, err, out, c.want)
					}
					if after := mustRun(t, flags, "export"); after != before {
						t.Errorf("apply --prune of %q changed the catalog:\n%s\nwas:\n%s", c.body, after, before)
					}
				})
			}
		})
	}
}

// TestApplyPruneDeletesTenantsOnlyWhenConfirmed: without --yes (and stdin
// not a terminal) a prune that would delete a tenant is refused, naming
// it, and changes nothing, not even the file's other changes; with --yes it
// goes ahead. Pruning rules and keys inside listed tenants needs no --yes.
func TestApplyPruneDeletesTenantsOnlyWhenConfirmed(t *testing.T) {
	flags := []string{"--database", "sqlite://" + filepath.Join(t.TempDir(), "catalog.db")}
	mustRun(t, flags, "tenant", "create", "acme")
	mustRun(t, flags, "rule", "set", "acme", "old", "--route", "/old", "--token-bucket", "5:1/s")
	mustRun(t, flags, "tenant", "create", "beta")
	before := mustRun(t, flags, "export")
	path := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(path, []byte("tenants: [{name: acme}, {name: gamma}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCLI(t, append([]string{"apply", "-f", path, "--prune"}, flags...)...)
	if err == nil || !strings.Contains(err.Error(), "would delete 1 tenants the file does not list, with their keys and rules: beta; nothing changed: add --yes") {
		t.Fatalf("apply --prune without --yes: %v", err)
	}
	if after := mustRun(t, flags, "export"); after != before {
		t.Fatalf("an unconfirmed prune changed the catalog:\n%s", after)
	}

	out := mustRun(t, flags, "apply", "-f", path, "--prune", "--yes")
	if !strings.Contains(out, "- tenant beta") || !strings.Contains(out, "Applied 3 changes.") {
		t.Errorf("apply --prune --yes printed:\n%s", out)
	}
	if got := mustRun(t, flags, "export"); got != "tenants:\n    - name: acme\n    - name: gamma\n" {
		t.Errorf("export after apply --prune --yes:\n%s", got)
	}

	mustRun(t, flags, "rule", "set", "acme", "old", "--route", "/old", "--token-bucket", "5:1/s")
	if out := mustRun(t, flags, "apply", "-f", path, "--prune"); !strings.Contains(out, "- rule acme/old") {
		t.Errorf("a prune of a rule alone printed:\n%s", out)
	}
}

// TestExportToFileIsAtomic: export -o replaces the file by renaming a
// complete one over it, never by rewriting it in place (a reader holding
// the old file still reads it whole, and no temporary file is left), and a
// failed export leaves the file as it was.
func TestExportToFileIsAtomic(t *testing.T) {
	flags := []string{"--database", "sqlite://" + filepath.Join(t.TempDir(), "catalog.db")}
	mustRun(t, flags, "tenant", "create", "acme")
	dir := t.TempDir()
	path := filepath.Join(dir, "catalog.yaml")
	const old = "tenants:\n    - name: old\n"
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	mustRun(t, flags, "export", "-o", path)
	if got, _ := os.ReadFile(path); string(got) != "tenants:\n    - name: acme\n" {
		t.Errorf("export -o wrote %q", got)
	}
	if got, _ := io.ReadAll(held); string(got) != old {
		t.Errorf("the file was rewritten in place: a reader of the old one reads %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("export -o left %d files in the directory, want 1: %v", len(entries), entries)
	}

	// A server that is not there: the export fails before a byte is
	// written, and the file keeps the last complete export.
	_, _, err = runCLI(t, "export", "-o", path, "--server", "http://127.0.0.1:1", "--token", testToken)
	if err == nil {
		t.Fatal("export from a server that is not there succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "tenants:\n    - name: acme\n" {
		t.Errorf("a failed export left %q", got)
	}
}
