package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// logRecords parses output as JSON lines, failing on any line that is not
// one: the service's stderr is a log stream a collector parses.
func logRecords(t *testing.T, output string) []map[string]any {
	t.Helper()
	var records []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(output), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a line of the output is not a JSON record: %q", line)
		}
		records = append(records, r)
	}
	return records
}

func recordWithMessage(records []map[string]any, prefix string) map[string]any {
	for _, r := range records {
		if msg, _ := r["msg"].(string); strings.HasPrefix(msg, prefix) {
			return r
		}
	}
	return nil
}

// startAndStop starts the service, stops it, and returns all it wrote.
func startAndStop(t *testing.T, cfg serveConfig) string {
	t.Helper()
	var output testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel()
	if err := <-svc.done; err != nil {
		t.Fatal(err)
	}
	return output.String()
}

// TestGeneratedAdminTokenIsOneStructuredRecord: off a terminal, the
// generated token is shown once, in a JSON record of the log stream, never
// as text inside it; the next start says the token in force is the stored
// one.
func TestGeneratedAdminTokenIsOneStructuredRecord(t *testing.T) {
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"), StoreTimeout: time.Second,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info"}
	run := func() []map[string]any {
		t.Helper()
		return logRecords(t, startAndStop(t, cfg))
	}
	records := run()
	banner := recordWithMessage(records, "admin token generated")
	if banner == nil {
		t.Fatalf("no record of the generated token: %v", records)
	}
	token, _ := banner["admin_token"].(string)
	if !strings.HasPrefix(token, sluice.AdminTokenPrefix) {
		t.Fatalf("the record's admin_token is %q, want the token", token)
	}
	if source := recordWithMessage(records, "admin token in force"); source == nil || source["source"] != "generated" {
		t.Errorf("start log says the token in force came from %v, want generated", source)
	}
	records = run()
	if recordWithMessage(records, "admin token generated") != nil {
		t.Error("a second start generated another token")
	}
	if source := recordWithMessage(records, "admin token in force"); source == nil || source["source"] != "stored" {
		t.Errorf("second start: the token in force came from %v, want stored", source)
	}
}

// TestGeneratedAdminTokenIsShownWhateverTheLogLevel: with --log-level
// error, off a terminal, the generated token is still written once (it is
// stored only as its hash, so a token not shown is lost).
func TestGeneratedAdminTokenIsShownWhateverTheLogLevel(t *testing.T) {
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"), StoreTimeout: time.Second,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "error"}
	banner := recordWithMessage(logRecords(t, startAndStop(t, cfg)), "admin token generated")
	if token, _ := banner["admin_token"].(string); !strings.HasPrefix(token, sluice.AdminTokenPrefix) {
		t.Fatalf("with --log-level error, the generated token is not shown: %v", banner)
	}
}

// TestGivenAdminTokenReplacesTheStoredOneLoudly: a token from the
// environment replaces the stored one with a warning naming the variable,
// and the start log says where the token in force came from.
func TestGivenAdminTokenReplacesTheStoredOneLoudly(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "sluice.db")
	start := func(token, origin string) []map[string]any {
		t.Helper()
		cfg := serveConfig{Addr: "127.0.0.1:0", Database: db, StoreTimeout: time.Second, AdminToken: token, AdminTokenOrigin: origin,
			DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info"}
		output := startAndStop(t, cfg)
		if strings.Contains(output, token) {
			t.Errorf("a given token reached the logs")
		}
		return logRecords(t, output)
	}
	first := start("first-admin-token-0123456789abcdefgh", "flag")
	if r := recordWithMessage(first, "admin token in force"); r == nil || r["source"] != "flag" {
		t.Errorf("token in force from %v, want flag", r)
	}
	if recordWithMessage(first, "the admin token given replaced") != nil {
		t.Error("the first token, on an empty catalog, was reported as replacing one")
	}
	same := start("first-admin-token-0123456789abcdefgh", "flag")
	if recordWithMessage(same, "the admin token given replaced") != nil {
		t.Error("the same token again was reported as replacing the stored one")
	}
	second := start("second-admin-token-0123456789abcdefg", "env")
	replaced := recordWithMessage(second, "the admin token given replaced")
	if replaced == nil || replaced["level"] != "WARN" || replaced["setting"] != "SLUICE_ADMIN_TOKEN" {
		t.Errorf("replacing the stored token from the environment logged %v, want a warning naming SLUICE_ADMIN_TOKEN", replaced)
	}
	if r := recordWithMessage(second, "admin token in force"); r == nil || r["source"] != "env" {
		t.Errorf("token in force from %v, want env", r)
	}
}

// TestAdminTokenGeneratedWhileTheStoreIsDown: with Redis down at start,
// the service starts anyway (checks get their rules' failure modes), so the
// token it generates and shows is one for a running service, and it works.
func TestAdminTokenGeneratedWhileTheStoreIsDown(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "sluice.db")
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: db, Redis: fmt.Sprintf("redis://127.0.0.1:%d/0", testenv.FreePort(t)),
		RedisPrefix: "sluice:", StoreTimeout: time.Second, DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info"}
	var output testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		cancel()
		t.Fatalf("the service did not start with its Redis down: %v", err)
	}
	defer func() { cancel(); <-svc.done }()
	m := adminTokenPattern.FindStringSubmatch(output.String())
	if m == nil || strings.Count(output.String(), sluice.AdminTokenPrefix) != 1 {
		t.Fatalf("the generated token is not shown exactly once:\n%s", output.String())
	}
	req, _ := http.NewRequest("GET", "http://"+svc.Addr+"/v1/tenants", nil)
	req.Header.Set("Authorization", "Bearer "+m[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the token shown gets %d from the admin API while Redis is down", resp.StatusCode)
	}
}
