package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/client"
)

// TestCreditsCommands: sluice credits add and set through the server and
// straight in its Redis; a repeated idempotency key changes nothing, and a
// bad amount is refused before anything is sent.
func TestCreditsCommands(t *testing.T) {
	s, redis := startServerOnRedis(t)
	s.mustRunIn(t, "server", "tenant", "create", "acme")
	a, err := client.NewAdmin(s.url, testToken)
	if err != nil {
		t.Fatal(err)
	}
	limits := []adminapi.Limit{{Name: "credits", Algorithm: "credits"}}
	if _, err := a.PutRule(context.Background(), adminapi.Rule{Tenant: "acme", Name: "api", Route: "/api*", Limits: limits}); err != nil {
		t.Fatal(err)
	}
	out := s.mustRunIn(t, "server", "rule", "set", "acme", "monthly", "--route", "/m*", "--credits", "1000/month", "--fixed-window", "quota=50/day@Europe/Berlin")
	if !strings.Contains(out, "credits: credits, refill set 1000 every month") || !strings.Contains(out, "quota: 50 per calendar day (Europe/Berlin)") {
		t.Fatalf("rule set --credits printed %q", out)
	}
	if _, _, err := s.runIn(t, "server", "rule", "set", "acme", "bad", "--route", "/b*", "--credits", "5/week"); err == nil || !strings.Contains(err.Error(), "refill every") {
		t.Fatalf("rule set --credits 5/week: %v", err)
	}
	out = s.mustRunIn(t, "server", "credits", "add", "acme", "api", "cust/1", "500", "--idempotency-key", "inv-1")
	if !strings.Contains(out, ": 500 (idempotency key inv-1)") {
		t.Fatalf("credits add printed %q", out)
	}
	out = s.mustRunIn(t, "server", "credits", "add", "acme", "api", "cust/1", "500", "--idempotency-key", "inv-1")
	if !strings.Contains(out, "nothing changed. Balance: 500.") {
		t.Fatalf("repeated credits add printed %q", out)
	}
	out = s.mustRunIn(t, "database", "credits", "set", "acme", "api", "cust/1", "42", "--redis", redis.URL())
	if !strings.Contains(out, ": 42 (idempotency key cli-") {
		t.Fatalf("credits set through Redis printed %q", out)
	}
	if _, _, err := s.runIn(t, "server", "credits", "add", "acme", "api", "cust/1", "0"); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Fatalf("credits add 0: %v", err)
	}
	if _, _, err := s.runIn(t, "server", "credits", "add", "acme", "api", "cust/1", "lots"); err == nil || !strings.Contains(err.Error(), "not a whole number") {
		t.Fatalf("credits add lots: %v", err)
	}
	d, err := a.PeekSubject(context.Background(), "acme", "api", "cust/1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 42 {
		t.Fatalf("balance after the commands: %+v, want 42", d)
	}
}
