package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/sqlite"
)

// TestServePrunesTheAuditLogPastItsRetention: entries older than
// --audit-retention are deleted in the background, without a request;
// --audit-retention off keeps them; a bad value is refused.
func TestServePrunesTheAuditLogPastItsRetention(t *testing.T) {
	for _, tc := range []struct {
		retention string
		kept      bool
	}{{"1ms", false}, {"off", true}} {
		t.Run(tc.retention, func(t *testing.T) {
			dbPath := filepath.Join(t.TempDir(), "sluice.db")
			ctx := context.Background()
			c, err := sqlite.Open(ctx, dbPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"a", "b", "c"} {
				if _, err := c.CreateTenant(sluice.WithActor(ctx, sluice.ActorOperator), name); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()
			time.Sleep(2 * time.Millisecond) // older than the 1ms retention

			token := "audit-prune-test-admin-token-0123456789abcdef"
			cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + dbPath, AdminToken: token, AuditRetention: tc.retention,
				StoreTimeout: time.Second, DefaultFailureMode: "closed", ShutdownTimeout: time.Second, LogLevel: "info"}
			runCtx, cancel := context.WithCancel(ctx)
			var output testenv.Buffer
			svc, err := startService(runCtx, cfg, &output)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cancel(); <-svc.done })
			tenantCreates := func() int {
				req, _ := http.NewRequest("GET", "http://"+svc.Addr+"/v1/audit?action=tenant.create", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var body struct{ Entries []json.RawMessage }
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
					t.Fatal(err)
				}
				return len(body.Entries)
			}
			if tc.kept {
				if n := tenantCreates(); n != 3 {
					t.Errorf("with --audit-retention off, %d of 3 entries are left", n)
				}
				return
			}
			testenv.Eventually(t, 10*time.Second, "the entries past the retention are pruned", func() bool { return tenantCreates() == 0 })
			testenv.Eventually(t, 10*time.Second, "the pruning is logged", func() bool {
				return strings.Contains(output.String(), `"msg":"audit log pruned"`)
			})
		})
	}
	base := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "x.db"),
		StoreTimeout: time.Second, DefaultFailureMode: "closed", LogLevel: "info"}
	for _, bad := range []string{"forever", "-1d", "0s"} {
		cfg := base
		cfg.AuditRetention = bad
		if _, err := startService(context.Background(), cfg, &testenv.Buffer{}); err == nil || !strings.Contains(err.Error(), "--audit-retention") {
			t.Errorf("--audit-retention %q: %v", bad, err)
		}
		cfg = base
		cfg.UsageRetention = bad
		if _, err := startService(context.Background(), cfg, &testenv.Buffer{}); err == nil || !strings.Contains(err.Error(), "--usage-retention") {
			t.Errorf("--usage-retention %q: %v", bad, err)
		}
	}
}
