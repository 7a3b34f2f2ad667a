package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
)

// TestRefusalsAreLoggedThrottled: checks refused for want of room are
// sluice.ErrStoreFull, and a flood of them makes one WARN line (naming the
// tenant and the bound), not one per check.
func TestRefusalsAreLoggedThrottled(t *testing.T) {
	var logs bytes.Buffer
	s := memory.New(memory.Options{MaxKeys: 10, MaxKeysPerTenant: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	check := func(subject string) error {
		_, err := s.Check(context.Background(), sluice.Request{Tenant: "acme", Rule: "r", Subject: subject,
			Limits: []sluice.Limit{sluice.FixedWindow(5, time.Hour)}, Cost: 1})
		return err
	}
	if err := check("kept"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		err := check(fmt.Sprint("new-", i))
		if !errors.Is(err, sluice.ErrStoreFull) || !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("a new subject past the budget: %v, want ErrStoreFull (and ErrStoreUnavailable)", err)
		}
	}
	if n := strings.Count(logs.String(), "the memory store has no room for new counters"); n != 1 {
		t.Fatalf("%d lines for 100 refusals within a minute, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), `tenant=acme`) || !strings.Contains(logs.String(), "MaxKeysPerTenant") {
		t.Errorf("the line does not say who and why:\n%s", logs.String())
	}
}
