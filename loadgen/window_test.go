package loadgen_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/loadgen"
	"github.com/sluicelabs/sluice/memory"
)

// TestAllowedByWindowCountsEachWindowExactly drives the real check API with
// more demand than a fixed window of 1 s allows, checked directly and
// leased: every allowed check is placed in exactly one window by the reset
// after its decision named, none over the limit; checked directly, every
// window wholly inside the run admitted exactly the limit.
func TestAllowedByWindowCountsEachWindowExactly(t *testing.T) {
	const limit = 40
	leased := sluice.FixedWindow(limit, time.Second).Named("w")
	leased.Lease = sluice.LeaseAuto
	catalog, secret := catalogtest.SQLiteTenant(t,
		sluice.Rule{Tenant: "acme", Name: "direct", Route: "/direct", Limits: []sluice.Limit{sluice.FixedWindow(limit, time.Second).Named("w")}, FailureMode: sluice.FailClosed},
		sluice.Rule{Tenant: "acme", Name: "leased", Route: "/leased", Limits: []sluice.Limit{leased}, FailureMode: sluice.FailClosed})
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	engine := check.New(store, check.Options{LeaseHotRate: 5})
	t.Cleanup(func() { engine.Close() })
	api, err := httpapi.New(context.Background(), httpapi.Options{Catalog: catalog, Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	for _, route := range []string{"/direct", "/leased"} {
		t.Run(route, func(t *testing.T) {
			start := time.Now()
			res, err := loadgen.Run(context.Background(), loadgen.NewHTTPCheck(srv.URL, secret, route, 1, 4),
				loadgen.Options{Concurrency: 4, Duration: 3200 * time.Millisecond, Subjects: 1, HotFraction: 1})
			if err != nil {
				t.Fatal(err)
			}
			end := time.Now()
			if res.Errors > 0 || res.Denied == 0 {
				t.Fatalf("want denies and no errors: %+v", res)
			}
			if res.Mismatched != 0 {
				t.Fatalf("%d allowed checks within one second named another window: %+v", res.Mismatched, res.AllowedByWindow)
			}
			if res.Unplaced != 0 {
				t.Fatalf("%d of %d allowed checks could not be placed in one window: %+v", res.Unplaced, res.Allowed, res.AllowedByWindow)
			}
			var total int64
			full := 0
			for i, w := range res.AllowedByWindow {
				total += w.Allowed
				if i > 0 && w.End <= res.AllowedByWindow[i-1].End {
					t.Fatalf("windows not sorted or not merged: %+v", res.AllowedByWindow)
				}
				if w.Allowed > limit {
					t.Fatalf("window ending %d admitted %d, limit %d: %+v", w.End, w.Allowed, limit, res.AllowedByWindow)
				}
				// A window wholly inside the run, checked directly,
				// admitted the limit: demand was far above it.
				if inside := !time.Unix(w.End-1, 0).Before(start) && !time.Unix(w.End, 0).After(end); inside {
					full++
					if route == "/direct" && w.Allowed != limit {
						t.Fatalf("window ending %d, inside the run, admitted %d of %d: %+v", w.End, w.Allowed, limit, res.AllowedByWindow)
					}
				}
			}
			if total != res.Allowed || full < 2 {
				t.Fatalf("windows count %d allowed of %d, %d full windows (want 2 or more): %+v", total, res.Allowed, full, res.AllowedByWindow)
			}
			b, err := json.Marshal(loadgen.NewReport("t", res))
			if err != nil || !strings.Contains(string(b), `"allowed_by_window":[{"end":`) || !strings.Contains(string(b), `"allowed_unplaced":0,"allowed_window_mismatch":0`) {
				t.Fatalf("report JSON lacks allowed_by_window or allowed_unplaced: %s %v", b, err)
			}
		})
	}
}
