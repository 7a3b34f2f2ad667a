package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/middleware"
)

// TestMiddlewarePlanFromTheRequest: a key function picks each request's
// plan; the plan's limits decide, an unknown plan is 400, and none is
// the Limits.
func TestMiddlewarePlanFromTheRequest(t *testing.T) {
	minute := func(n int64) []sluice.Limit {
		return []sluice.Limit{sluice.FixedWindow(n, time.Minute).Named("minute")}
	}
	app := &served{}
	h := mustMiddleware(t, middleware.Options{Store: newMemory(t), Name: "api", Limits: minute(2),
		Plans: sluice.Plans{"free": minute(1), "pro": minute(4)},
		Plan:  middleware.Header("X-Plan"), Key: middleware.Header("X-User")})(app)
	for _, c := range []struct {
		plan string
		want int
	}{{"", 2}, {"free", 1}, {"pro", 4}} {
		ok := 0
		for range 6 {
			w := get(h, func(r *http.Request) { r.Header.Set("X-User", "u-"+c.plan); r.Header.Set("X-Plan", c.plan) })
			if w.Code == http.StatusOK {
				ok++
			} else if w.Code != http.StatusTooManyRequests {
				t.Fatalf("plan %q: status %d %s", c.plan, w.Code, w.Body)
			}
		}
		if ok != c.want {
			t.Errorf("plan %q: %d of 6 admitted, want %d", c.plan, ok, c.want)
		}
	}
	before := app.n.Load()
	w := get(h, func(r *http.Request) { r.Header.Set("X-User", "v"); r.Header.Set("X-Plan", "gold") })
	if w.Code != http.StatusBadRequest || app.n.Load() != before {
		t.Errorf("unknown plan: %d %s, want 400 and the application not reached", w.Code, w.Body)
	}
	if _, err := middleware.New(middleware.Options{Store: newMemory(t), Name: "api", Limits: minute(1), Plan: middleware.Header("X-Plan")}); err == nil {
		t.Errorf("Plan without Plans accepted")
	}
}
