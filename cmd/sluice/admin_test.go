package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice"
)

func TestRuleFlags(t *testing.T) {
	for _, c := range []struct {
		name    string
		flags   ruleFlags
		wantErr string
	}{
		{"one_bucket", ruleFlags{route: "/api/payments*", tokenBuckets: []string{"10:2/s"}, failureMode: "closed"}, ""},
		{"several_limits", ruleFlags{route: "*", tokenBuckets: []string{"burst=10:2/s"}, slidingWindows: []string{"600/1m"}, fixedWindows: []string{"100/1s"}, failureMode: "open", shadow: true}, ""},
		{"no_route", ruleFlags{tokenBuckets: []string{"10:2/s"}, failureMode: "closed"}, "--route is required"},
		{"bad_route", ruleFlags{route: "/a*b", tokenBuckets: []string{"10:2/s"}, failureMode: "closed"}, "only at its end"},
		{"no_limits", ruleFlags{route: "/a", failureMode: "closed"}, "at least one limit"},
		{"same_name_twice", ruleFlags{route: "/a", tokenBuckets: []string{"10:2/s", "20:2/s"}, failureMode: "closed"}, "used twice"},
		{"no_failure_mode_is_the_servers_default", ruleFlags{route: "/a", tokenBuckets: []string{"10:2/s"}}, ""},
		{"bad_failure_mode", ruleFlags{route: "/a", tokenBuckets: []string{"10:2/s"}, failureMode: "maybe"}, "--failure-mode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.flags.rule("acme", "payments")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Tenant != "acme" || r.Name != "payments" || r.Route != c.flags.route || r.Shadow != c.flags.shadow {
				t.Errorf("rule %+v", r)
			}
		})
	}
}

func TestBindEnv(t *testing.T) {
	newCmd := func() (*cobra.Command, *string, *time.Duration) {
		var addr string
		var timeout time.Duration
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		cmd.Flags().StringVar(&addr, "admin-token", "default", "")
		cmd.Flags().DurationVar(&timeout, "store-timeout", time.Second, "")
		return cmd, &addr, &timeout
	}
	t.Run("environment_fills_flags_not_given", func(t *testing.T) {
		t.Setenv("SLUICE_ADMIN_TOKEN", "from-env")
		t.Setenv("SLUICE_STORE_TIMEOUT", "75ms")
		cmd, token, timeout := newCmd()
		if err := cmd.ParseFlags(nil); err != nil {
			t.Fatal(err)
		}
		if err := bindEnv(cmd); err != nil {
			t.Fatal(err)
		}
		if *token != "from-env" || *timeout != 75*time.Millisecond {
			t.Errorf("token %q, timeout %v", *token, *timeout)
		}
	})
	t.Run("command_line_wins", func(t *testing.T) {
		t.Setenv("SLUICE_ADMIN_TOKEN", "from-env")
		cmd, token, _ := newCmd()
		if err := cmd.ParseFlags([]string{"--admin-token", "from-flag"}); err != nil {
			t.Fatal(err)
		}
		if err := bindEnv(cmd); err != nil {
			t.Fatal(err)
		}
		if *token != "from-flag" {
			t.Errorf("token %q", *token)
		}
	})
	t.Run("bad_value_names_the_variable", func(t *testing.T) {
		t.Setenv("SLUICE_STORE_TIMEOUT", "soon")
		cmd, _, _ := newCmd()
		_ = cmd.ParseFlags(nil)
		err := bindEnv(cmd)
		if err == nil || !strings.Contains(err.Error(), "SLUICE_STORE_TIMEOUT") {
			t.Errorf("error %v", err)
		}
	})
}

// runCLI runs the sluice command line with args and returns stdout, stderr.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	rootCmd.SetOut(&stdout)
	rootCmd.SetErr(&stderr)
	// Not a terminal, whatever go test was started from: a command that
	// would ask for a confirmation refuses instead.
	rootCmd.SetIn(strings.NewReader(""))
	rootCmd.SetArgs(args)
	t.Cleanup(func() { rootCmd.SetArgs(nil); rootCmd.SetOut(nil); rootCmd.SetErr(nil); rootCmd.SetIn(nil) })
	// The command tree is a package variable: flags keep the values of the
	// previous run (and repeatable ones append to them) unless reset.
	resetFlags(rootCmd)
	err := rootCmd.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

// resetFlags puts every flag of cmd and its subcommands back to its default.
func resetFlags(cmd *cobra.Command) {
	reset := func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			_ = sv.Replace(nil)
		} else {
			_ = f.Value.Set(f.DefValue)
		}
		f.Changed = false
	}
	cmd.Flags().VisitAll(reset)
	cmd.PersistentFlags().VisitAll(reset)
	for _, sub := range cmd.Commands() {
		resetFlags(sub)
	}
}

func TestAdminCommands(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "sluice.db")
	mustRun := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, append(args, "--database", db)...)
		if err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	mustRun("migrate")
	mustRun("tenant", "create", "acme")
	secret := strings.TrimSpace(mustRun("key", "create", "acme", "--role", "check", "--name", "web"))
	if !strings.HasPrefix(secret, sluice.APIKeyPrefix) {
		t.Fatalf("key create printed %q, want the secret alone", secret)
	}
	mustRun("rule", "set", "acme", "payments", "--route", "/api/payments*", "--token-bucket", "10:2/s", "--sliding-window", "minute=600/1m")
	if out := mustRun("rule", "list", "acme"); !strings.Contains(out, "payments") || !strings.Contains(out, "/api/payments*") {
		t.Errorf("rule list: %s", out)
	}
	if out := mustRun("rule", "get", "acme", "payments", "-o", "json"); !strings.Contains(out, `"refill_per_second": 2`) {
		t.Errorf("rule get: %s", out)
	}
	keys := mustRun("key", "list", "acme")
	if strings.Contains(keys, secret) || !strings.Contains(keys, "web") {
		t.Errorf("key list: %s", keys)
	}
	id := strings.Fields(strings.Split(keys, "\n")[1])[0]
	mustRun("key", "revoke", "acme", id)
	mustRun("tenant", "suspend", "acme")
	if out := mustRun("tenant", "list"); !strings.Contains(out, "suspended") {
		t.Errorf("tenant list: %s", out)
	}
	mustRun("tenant", "resume", "acme")
	mustRun("rule", "delete", "acme", "payments")

	_, _, err := runCLI(t, "tenant", "create", "acme", "--database", db)
	if !errors.Is(err, sluice.ErrConflict) {
		t.Errorf("duplicate tenant: %v", err)
	}
	_, _, err = runCLI(t, "rule", "set", "acme", "r", "--route", "/x", "--token-bucket", "0:1/s", "--database", db)
	if err == nil || !strings.Contains(err.Error(), "capacity must be a positive integer") {
		t.Errorf("zero capacity: %v", err)
	}
	mustRun("tenant", "delete", "acme")
}

// TestDatabasePathEnforcesTenantCaps: the command line's --database path
// writes the catalog directly, and the catalog enforces the caps serve is
// given, from the same environment variables.
func TestDatabasePathEnforcesTenantCaps(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "sluice.db")
	t.Setenv("SLUICE_MAX_RULES_PER_TENANT", "1")
	t.Setenv("SLUICE_MAX_KEYS_PER_TENANT", "1")
	run := func(args ...string) error {
		t.Helper()
		_, _, err := runCLI(t, append(args, "--database", db)...)
		return err
	}
	for _, args := range [][]string{{"tenant", "create", "acme"}, {"key", "create", "acme", "--role", "check"},
		{"rule", "set", "acme", "a", "--route", "/a", "--token-bucket", "10:2/s"}} {
		if err := run(args...); err != nil {
			t.Fatalf("sluice %s: %v", strings.Join(args, " "), err)
		}
	}
	err := run("rule", "set", "acme", "b", "--route", "/b", "--token-bucket", "10:2/s")
	if !errors.Is(err, sluice.ErrTenantCap) || !strings.Contains(err.Error(), `tenant "acme" already has 1 rules`) {
		t.Errorf("a second rule past a cap of 1: %v, want ErrTenantCap", err)
	}
	if err := run("key", "create", "acme", "--role", "admin", "--name", "ops"); !errors.Is(err, sluice.ErrTenantCap) {
		t.Errorf("a second key past a cap of 1: %v, want ErrTenantCap", err)
	}
	if err := run("rule", "set", "acme", "a", "--route", "/a2", "--token-bucket", "10:2/s"); err != nil {
		t.Errorf("replacing the rule at the cap: %v", err)
	}
}

func TestConcurrencyFlag(t *testing.T) {
	r, err := ruleFlags{route: "/upload*", concurrency: []string{"uploads=3/10m"}, tokenBuckets: []string{"10:2/s"}}.rule("acme", "up")
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.Concurrency(3, 10*time.Minute).Named("uploads")
	if len(r.Limits) != 2 || r.Limits[1] != want {
		t.Fatalf("limits %+v, want the bucket and %+v", r.Limits, want)
	}
}

// TestLimitFlagErrorsNameTheFlag: a spec sluice.ParseLimitSpec refuses is
// reported with the flag and the spec given.
func TestLimitFlagErrorsNameTheFlag(t *testing.T) {
	for want, rf := range map[string]ruleFlags{
		`--token-bucket "10": missing ':'`:                    {route: "/a", tokenBuckets: []string{"10"}},
		`--sliding-window "600": missing '/'`:                 {route: "/a", slidingWindows: []string{"600"}},
		`--fixed-window "0/1s": `:                             {route: "/a", fixedWindows: []string{"0/1s"}},
		`--concurrency "x/30s": limit "x" is not a whole num`: {route: "/a", concurrency: []string{"x/30s"}},
	} {
		if _, err := rf.rule("acme", "r"); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %v, want one starting %q", err, want)
		}
	}
}
