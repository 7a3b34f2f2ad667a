package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	sluiceredis "github.com/sluicelabs/sluice/redis"
	"github.com/sluicelabs/sluice/sqlite"
)

const testToken = "cli-test-admin-token-0123456789"

// server is a real admin API over a SQLite catalog the CLI can also open
// directly, so one test can run a command both ways on the same data.
type server struct {
	url      string
	database string // --database of the same catalog
}

func startServer(t *testing.T) server {
	t.Helper()
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	return startServerOn(t, store)
}

// startServerOn starts the server over store.
func startServerOn(t *testing.T, store sluice.Store) server {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	catalog, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { catalog.Close() })
	if err := catalog.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := catalog.SetAdminTokenHash(ctx, sluice.HashAPIKey(testToken)); err != nil {
		t.Fatal(err)
	}
	// A generous store deadline: these tests are about the CLI and the
	// failure modes, not deadlines, and a loaded machine must not turn a
	// slow answer into a degraded one.
	engine := check.New(store, check.Options{Guard: guard.Options{Timeout: 5 * time.Second}})
	t.Cleanup(func() { engine.Close() })
	// Open, not the built-in closed: a rule set without --failure-mode
	// shows open only if the CLI left the choice to the server.
	api, err := httpapi.New(ctx, httpapi.Options{Catalog: catalog, Engine: engine, DefaultFailureMode: sluice.FailOpen,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = api.Run(runCtx) }()
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return server{url: srv.URL, database: "sqlite://" + path}
}

// startServerOnRedis starts the server over a Redis of the test's own, which
// the test may stop.
func startServerOnRedis(t *testing.T) (server, *testenv.RedisServer) {
	t.Helper()
	redis := testenv.Redis(t)
	store, err := sluiceredis.Open(redis.URL(), sluiceredis.Options{Prefix: "sluice:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return startServerOn(t, store), redis
}

// get answers GET path of the admin API as the operator, decoded.
func (s server) get(t *testing.T, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// modes are the two ways the catalog commands run.
var modes = []string{"database", "server"}

// runIn runs a sluice command in a mode against s.
func (s server) runIn(t *testing.T, mode string, args ...string) (string, string, error) {
	t.Helper()
	if mode == "database" {
		return runCLI(t, append(args, "--database", s.database)...)
	}
	return runCLI(t, append(args, "--server", s.url, "--token", testToken)...)
}

func (s server) mustRunIn(t *testing.T, mode string, args ...string) string {
	t.Helper()
	out, errOut, err := s.runIn(t, mode, args...)
	if err != nil {
		t.Fatalf("%s mode: sluice %s: %v\n%s", mode, strings.Join(args, " "), err, errOut)
	}
	return out
}

// TestRemoteAndDatabaseModesAgree runs every catalog command through the
// catalog database and through the admin API: writes on twin tenants must
// say the same, reads of the same data must print the same.
func TestRemoteAndDatabaseModesAgree(t *testing.T) {
	s := startServer(t)
	// Each mode writes its own tenant; a write's output, with the tenant
	// name swapped, must match the other mode's.
	tenantOf := map[string]string{"database": "acme", "server": "beta"}
	write := func(args ...string) {
		t.Helper()
		outs := map[string]string{}
		for _, mode := range modes {
			a := make([]string, len(args))
			for i, arg := range args {
				a[i] = strings.ReplaceAll(arg, "TENANT", tenantOf[mode])
			}
			outs[mode] = strings.ReplaceAll(s.mustRunIn(t, mode, a...), tenantOf[mode], "TENANT")
		}
		if outs["database"] != outs["server"] {
			t.Errorf("sluice %s:\ndatabase mode: %q\nserver mode:   %q", strings.Join(args, " "), outs["database"], outs["server"])
		}
	}
	// Reads of the same data must print exactly the same in both modes.
	read := func(args ...string) string {
		t.Helper()
		db := s.mustRunIn(t, "database", args...)
		api := s.mustRunIn(t, "server", args...)
		if db != api {
			t.Errorf("sluice %s:\ndatabase mode:\n%s\nserver mode:\n%s", strings.Join(args, " "), db, api)
		}
		return db
	}

	write("tenant", "create", "TENANT")
	for _, mode := range modes {
		secret := strings.TrimSpace(s.mustRunIn(t, mode, "key", "create", tenantOf[mode], "--role", "check", "--name", "web"))
		if !strings.HasPrefix(secret, sluice.APIKeyPrefix) {
			t.Fatalf("%s mode: key create printed %q, want the secret alone", mode, secret)
		}
	}
	write("rule", "set", "TENANT", "payments", "--route", "/api/payments*", "--token-bucket", "10:2/s", "--sliding-window", "minute=600/1m", "--failure-mode", "open", "--shadow")
	write("rule", "set", "TENANT", "payments", "--route", "/api/payments*", "--fixed-window", "100/1s", "--failure-mode", "local")
	write("rule", "set", "TENANT", "orders", "--route", "/api/orders", "--token-bucket", "5:1/m", "--failure-mode", "closed")

	if out := read("tenant", "list"); !strings.Contains(out, "acme") || !strings.Contains(out, "beta") {
		t.Errorf("tenant list:\n%s", out)
	}
	for _, tenant := range []string{"acme", "beta"} {
		if out := read("rule", "list", tenant); !strings.Contains(out, "orders") || !strings.Contains(out, "fixed_window: 100 per fixed 1s") {
			t.Errorf("rule list %s:\n%s", tenant, out)
		}
		read("rule", "get", tenant, "payments")
		if out := read("key", "list", tenant); !strings.Contains(out, "web") {
			t.Errorf("key list %s:\n%s", tenant, out)
		}
		for _, o := range []string{"json", "yaml"} {
			read("tenant", "list", "-o", o)
			read("key", "list", tenant, "-o", o)
			read("rule", "list", tenant, "-o", o)
			read("rule", "get", tenant, "payments", "-o", o)
		}
	}
	// -o json is the API's own body: what GET /v1/tenants/acme/rules/payments answers.
	var got, want map[string]any
	if err := json.Unmarshal([]byte(read("rule", "get", "acme", "payments", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	want = s.get(t, "/v1/tenants/acme/rules/payments")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rule get -o json:\n%v\nthe API answers:\n%v", got, want)
	}
	got = nil
	if err := json.Unmarshal([]byte(read("key", "list", "acme", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if want = s.get(t, "/v1/tenants/acme/keys"); !reflect.DeepEqual(got, want) {
		t.Errorf("key list -o json:\n%v\nthe API answers:\n%v", got, want)
	}
	var y struct {
		Tenants []struct {
			Name   string `yaml:"name"`
			Status string `yaml:"status"`
		} `yaml:"tenants"`
	}
	if err := yaml.Unmarshal([]byte(read("tenant", "list", "-o", "yaml")), &y); err != nil || len(y.Tenants) != 2 || y.Tenants[0].Status != "active" {
		t.Errorf("tenant list -o yaml: %+v, %v", y, err)
	}
	if _, _, err := s.runIn(t, "database", "tenant", "list", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "table, json or yaml") {
		t.Errorf("-o xml: %v", err)
	}

	for _, mode := range modes {
		keys := s.mustRunIn(t, mode, "key", "list", tenantOf[mode])
		id := strings.Fields(strings.Split(keys, "\n")[1])[0]
		out := s.mustRunIn(t, mode, "key", "revoke", tenantOf[mode], id)
		if want := "Revoked key " + id + " (name web) of tenant " + tenantOf[mode] + ".\n"; out != want {
			t.Errorf("%s mode: key revoke printed %q, want %q", mode, out, want)
		}
	}
	read("key", "list", "acme")
	write("tenant", "suspend", "TENANT")
	if out := read("tenant", "list"); strings.Count(out, "suspended") != 2 {
		t.Errorf("tenant list after suspend:\n%s", out)
	}
	write("tenant", "resume", "TENANT")
	write("rule", "delete", "TENANT", "orders")
	read("rule", "list", "acme")

	for _, mode := range modes {
		_, _, err := s.runIn(t, mode, "tenant", "create", tenantOf[mode])
		if !errors.Is(err, sluice.ErrConflict) {
			t.Errorf("%s mode: duplicate tenant: %v, want ErrConflict", mode, err)
		}
		_, _, err = s.runIn(t, mode, "rule", "get", tenantOf[mode], "nope")
		if !errors.Is(err, sluice.ErrNotFound) {
			t.Errorf("%s mode: missing rule: %v, want ErrNotFound", mode, err)
		}
	}
	write("tenant", "delete", "TENANT")
	if out := read("tenant", "list"); strings.Contains(out, "acme") || strings.Contains(out, "beta") {
		t.Errorf("tenant list after delete:\n%s", out)
	}
}

func TestRemoteFlags(t *testing.T) {
	s := startServer(t)
	t.Run("token_required", func(t *testing.T) {
		_, _, err := runCLI(t, "tenant", "list", "--server", s.url)
		if err == nil || !strings.Contains(err.Error(), "--token") {
			t.Errorf("error %v, want one asking for --token", err)
		}
	})
	t.Run("token_from_environment", func(t *testing.T) {
		t.Setenv("SLUICE_SERVER", s.url)
		t.Setenv("SLUICE_TOKEN", testToken)
		out, _, err := runCLI(t, "tenant", "list")
		if err != nil || !strings.HasPrefix(out, "NAME") {
			t.Errorf("tenant list with SLUICE_SERVER and SLUICE_TOKEN: %q, %v", out, err)
		}
	})
	t.Run("wrong_token_shows_the_servers_answer", func(t *testing.T) {
		_, _, err := runCLI(t, "tenant", "list", "--server", s.url, "--token", "not-the-token")
		if err == nil || !strings.Contains(err.Error(), "invalid_credentials") || strings.Contains(err.Error(), "not-the-token") {
			t.Errorf("error %v, want the server's invalid_credentials, without the token", err)
		}
	})
	t.Run("server_and_database_conflict", func(t *testing.T) {
		_, _, err := runCLI(t, "tenant", "list", "--server", s.url, "--token", testToken, "--database", s.database)
		if err == nil || !strings.Contains(err.Error(), "both given") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("server_down", func(t *testing.T) {
		down := httptest.NewServer(nil)
		down.Close()
		for _, args := range [][]string{{"tenant", "list"}, {"subject", "reset", "a", "b", "c"}, {"check", "--route", "/x", "--api-key", "k"}} {
			_, _, err := runCLI(t, append(args, "--server", down.URL, "--token", testToken)...)
			if err == nil || !strings.HasPrefix(err.Error(), "could not reach the server "+down.URL+": ") {
				t.Errorf("sluice %s with the server down: %v", strings.Join(args, " "), err)
			}
		}
	})
	t.Run("bad_server_url", func(t *testing.T) {
		_, _, err := runCLI(t, "tenant", "list", "--server", "localhost:8080", "--token", testToken)
		if err == nil || !strings.Contains(err.Error(), "--server") {
			t.Errorf("error %v", err)
		}
	})
}

// TestReadsNeverCreateACatalog: a mistyped --database must not leave an
// empty catalog behind and answer "no tenants".
func TestReadsNeverCreateACatalog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{{"tenant", "list"}, {"key", "list", "acme"}, {"rule", "list", "acme"}, {"rule", "get", "acme", "r"}} {
		_, _, err := runCLI(t, append(args, "--database", "sqlite://"+path)...)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("sluice %s on a missing catalog: %v, want an error naming %s", strings.Join(args, " "), err, path)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("sluice %s created %s", strings.Join(args, " "), path)
		}
	}
}

func TestCheckAndSubjectReset(t *testing.T) {
	s := startServer(t)
	s.mustRunIn(t, "server", "tenant", "create", "acme")
	s.mustRunIn(t, "server", "rule", "set", "acme", "orders", "--route", "/api/orders*", "--fixed-window", "minute=2/1m")
	secret := strings.TrimSpace(s.mustRunIn(t, "server", "key", "create", "acme", "--role", "check", "--name", "web"))
	check := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"check", "--server", s.url, "--api-key", secret}, args...)...)
		return out, err
	}

	if out, err := check("--route", "/api/orders/1", "--subject", "u1"); err != nil || !strings.HasPrefix(out, "Allowed by rule orders: 1 of 2 remaining.") || !strings.Contains(out, "minute") {
		t.Errorf("first check: %q, %v", out, err)
	}
	var d struct {
		Allowed   bool    `json:"allowed"`
		Rule      *string `json:"rule"`
		Remaining int64   `json:"remaining"`
		Limits    []struct {
			Name string `json:"name"`
		} `json:"limits"`
	}
	out, err := check("--route", "/api/orders/1", "--subject", "u1", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || !d.Allowed || d.Rule == nil || *d.Rule != "orders" || d.Remaining != 0 || len(d.Limits) != 1 {
		t.Errorf("second check -o json: %s, %v", out, err)
	}
	// A denial is an answer: exit 0, unless --fail-on-deny.
	if out, err := check("--route", "/api/orders/1", "--subject", "u1"); err != nil || !strings.HasPrefix(out, "Denied by rule orders: retry after") {
		t.Errorf("denied check: %q, %v", out, err)
	}
	if out, err := check("--route", "/api/orders/1", "--subject", "u1", "--fail-on-deny"); err != exitDenied || !strings.HasPrefix(out, "Denied") {
		t.Errorf("denied check with --fail-on-deny: %q, %v, want exit status 2", out, err)
	}
	if out, err := check("--route", "/elsewhere", "--fail-on-deny"); err != nil || !strings.HasPrefix(out, "Allowed: no rule matches /elsewhere") {
		t.Errorf("unmatched route: %q, %v", out, err)
	}
	if _, err := check("--route", "/api/orders/1", "--subject", "u1", "--cost", "-1"); err == nil {
		t.Error("negative cost accepted")
	}
	if _, _, err := runCLI(t, "check", "--route", "/x", "--api-key", secret); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Errorf("check without --server: %v", err)
	}
	if _, _, err := runCLI(t, "check", "--server", s.url, "--api-key", "sk_nope", "--route", "/x"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("check with an unknown key: %v", err)
	}

	out = s.mustRunIn(t, "server", "subject", "reset", "acme", "orders", "u1")
	if out != "Reset subject u1 under rule orders of tenant acme.\n" {
		t.Errorf("subject reset printed %q", out)
	}
	if out, err := check("--route", "/api/orders/1", "--subject", "u1", "--fail-on-deny"); err != nil || !strings.HasPrefix(out, "Allowed by rule orders: 1 of 2 remaining.") {
		t.Errorf("check after reset: %q, %v", out, err)
	}
	// A subject with '/' travels escaped in the path.
	s.mustRunIn(t, "server", "subject", "reset", "acme", "orders", "10.0.0.0/8")
	if _, _, err := s.runIn(t, "server", "subject", "reset", "acme", "nope", "u1"); !errors.Is(err, sluice.ErrNotFound) {
		t.Errorf("reset under a missing rule: %v", err)
	}
	if _, _, err := runCLI(t, "subject", "reset", "acme", "orders", "u1"); err == nil || !strings.Contains(err.Error(), "--server") || !strings.Contains(err.Error(), "--redis") {
		t.Errorf("reset without --server or --redis: %v", err)
	}
}

func TestCommandLineMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"tenant", "creat", "x"}, []string{`unknown command "creat" for "sluice tenant"; did you mean "create"?`, "sluice tenant create <tenant>"}},
		{[]string{"tenant"}, []string{"tenant needs a subcommand", "sluice tenant list"}},
		{[]string{"rule", "lst", "acme"}, []string{`did you mean "list"?`}},
		{[]string{"rule", "det", "acme"}, []string{`did you mean "get" or "set"?`}},
		{[]string{"rule", "lis", "acme"}, []string{`did you mean "list"?`}},
		{[]string{"key", "frobnicate"}, []string{`unknown command "frobnicate" for "sluice key".`, "sluice key revoke"}},
		{[]string{"subject", "rest"}, []string{`did you mean "reset"?`}},
		{[]string{"tenant", "create"}, []string{"tenant create takes 1 argument (<tenant>), got 0.", "Usage: sluice tenant create <tenant>"}},
		{[]string{"rule", "get", "acme"}, []string{"rule get takes 2 arguments (<tenant> <rule>), got 1."}},
		{[]string{"tenant", "list", "extra"}, []string{`tenant list takes no arguments, got ["extra"]`}},
		{[]string{"tenat"}, []string{`unknown command "tenat" for "sluice"`, "tenant"}},
	} {
		t.Run(strings.Join(c.args, "_"), func(t *testing.T) {
			_, _, err := runCLI(t, c.args...)
			if err == nil {
				t.Fatalf("sluice %s succeeded", strings.Join(c.args, " "))
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestRevokeByName(t *testing.T) {
	s := startServer(t)
	for _, mode := range modes {
		tenant := map[string]string{"database": "acme", "server": "beta"}[mode]
		s.mustRunIn(t, mode, "tenant", "create", tenant)
		s.mustRunIn(t, mode, "key", "create", tenant, "--role", "check", "--name", "web")
		s.mustRunIn(t, mode, "key", "create", tenant, "--role", "admin", "--name", "ops")
		out := s.mustRunIn(t, mode, "key", "revoke", tenant, "web")
		if !strings.HasPrefix(out, "Revoked key key_") || !strings.Contains(out, "(name web) of tenant "+tenant) {
			t.Errorf("%s mode: revoke by name printed %q", mode, out)
		}
		// The name is free again; the revoked key keeps it in the list.
		s.mustRunIn(t, mode, "key", "create", tenant, "--role", "check", "--name", "web")
		s.mustRunIn(t, mode, "key", "revoke", tenant, "web")
		if _, _, err := s.runIn(t, mode, "key", "revoke", tenant, "web"); !errors.Is(err, sluice.ErrNotFound) || !strings.Contains(err.Error(), "no key with ID") {
			t.Errorf("%s mode: revoking a name with no active key: %v", mode, err)
		}
		list := s.mustRunIn(t, mode, "key", "list", tenant)
		if strings.Count(list, " web ") != 2 || strings.Count(list, "  -\n") != 1 {
			t.Errorf("%s mode: key list after revokes:\n%s", mode, list)
		}
	}
}

// TestOmittedFailureModeIsTheServersDefault: a rule set without
// --failure-mode, through either mode, is stored without one, and the
// serving instance applies its own default when the store is down.
func TestOmittedFailureModeIsTheServersDefault(t *testing.T) {
	// The test server's default is open, not the built-in closed.
	s, redis := startServerOnRedis(t)
	keys := map[string]string{}
	for _, mode := range modes {
		tenant := map[string]string{"database": "acme", "server": "beta"}[mode]
		s.mustRunIn(t, mode, "tenant", "create", tenant)
		out := s.mustRunIn(t, mode, "rule", "set", tenant, "r", "--route", "/x", "--sliding-window", "weekly=1000/1w")
		if !strings.Contains(out, "weekly: 1000 per sliding 168h") || !strings.Contains(out, "failure mode: the server's default") {
			t.Errorf("%s mode: rule set printed %q", mode, out)
		}
		var r struct {
			FailureMode *string `json:"failure_mode"`
		}
		if err := json.Unmarshal([]byte(s.mustRunIn(t, mode, "rule", "get", tenant, "r", "-o", "json")), &r); err != nil || r.FailureMode == nil || *r.FailureMode != "" {
			t.Errorf("%s mode: stored failure mode %v, want \"\" (the server's default)", mode, r.FailureMode)
		}
		keys[mode] = strings.TrimSpace(s.mustRunIn(t, "server", "key", "create", tenant, "--role", "check", "--name", "web"))
	}
	check := func(mode string) checkapi.Decision {
		t.Helper()
		out, errOut, err := runCLI(t, "check", "--server", s.url, "--api-key", keys[mode], "--route", "/x", "-o", "json")
		if err != nil {
			t.Fatalf("%s mode: check: %v\n%s", mode, err, errOut)
		}
		var d checkapi.Decision
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("%s mode: check printed %q: %v", mode, out, err)
		}
		return d
	}
	for _, mode := range modes {
		if d := check(mode); !d.Allowed || d.Degraded {
			t.Fatalf("%s mode: check with the store up: %+v", mode, d)
		}
	}
	redis.Stop()
	for _, mode := range modes {
		if d := check(mode); !d.Allowed || !d.Degraded {
			t.Errorf("%s mode: check with the store down: %+v, want allowed and degraded (the server's default, open)", mode, d)
		}
	}
}

// TestSubjectResetThroughRedis resets a denied subject without a server:
// in the Redis the server counts in, and through the catalog to its deny
// cache. It also holds the CLI to the servers' counter namespace (sluice.Tenant.CounterNamespace).
func TestSubjectResetThroughRedis(t *testing.T) {
	s, redis := startServerOnRedis(t)
	s.mustRunIn(t, "server", "tenant", "create", "acme")
	s.mustRunIn(t, "server", "rule", "set", "acme", "orders", "--route", "/api/orders*", "--fixed-window", "1/1h")
	secret := strings.TrimSpace(s.mustRunIn(t, "server", "key", "create", "acme", "--role", "check", "--name", "web"))
	check := func() error {
		_, _, err := runCLI(t, "check", "--server", s.url, "--api-key", secret, "--route", "/api/orders/1", "--subject", "u1", "--fail-on-deny")
		return err
	}
	if err := check(); err != nil {
		t.Fatalf("first check: %v", err)
	}
	if err := check(); err != exitDenied {
		t.Fatalf("second check: %v, want a denial", err)
	}
	out := s.mustRunIn(t, "database", "subject", "reset", "acme", "orders", "u1", "--redis", redis.URL())
	if out != "Reset subject u1 under rule orders of tenant acme.\n" {
		t.Errorf("subject reset printed %q", out)
	}
	// The server hears of the reset through the catalog's change feed
	// within a second; until then its deny cache may still refuse.
	testenv.Eventually(t, 10*time.Second, "the server hears of the reset", func() bool {
		err := check()
		if err != nil && err != exitDenied {
			t.Fatalf("check after the reset: %v, want allowed", err)
		}
		return err == nil
	})
	if _, _, err := s.runIn(t, "server", "subject", "reset", "acme", "orders", "u1", "--redis", redis.URL()); err == nil || !strings.Contains(err.Error(), "both given") {
		t.Errorf("--server with --redis: %v", err)
	}
	if _, _, err := s.runIn(t, "database", "subject", "reset", "acme", "nope", "u1", "--redis", redis.URL()); !errors.Is(err, sluice.ErrNotFound) {
		t.Errorf("reset under a missing rule: %v", err)
	}
}
