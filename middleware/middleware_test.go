package middleware_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/middleware"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// fixedClock pins the memory store's time so retry_after is deterministic.
var epoch = time.UnixMilli(1_800_000_000_000)

func newMemory(t *testing.T) *memory.Store {
	t.Helper()
	s := memory.New(memory.Options{Clock: func() time.Time { return epoch }})
	t.Cleanup(func() { s.Close() })
	return s
}

// served counts the requests that reached the application.
type served struct{ n atomic.Int64 }

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.n.Add(1)
	w.Write([]byte("ok"))
}

func mustMiddleware(t *testing.T, opts middleware.Options) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := middleware.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func get(h http.Handler, mutate func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/orders", nil)
	r.RemoteAddr = "203.0.113.7:4000"
	if mutate != nil {
		mutate(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestMiddlewareAllowsThenDenies(t *testing.T) {
	app := &served{}
	h := mustMiddleware(t, middleware.Options{
		Store:  newMemory(t),
		Name:   "api",
		Limits: []sluice.Limit{sluice.TokenBucket(2, 0.4).Named("burst")},
	})(app)

	for i := range 2 {
		w := get(h, nil)
		if w.Code != 200 {
			t.Fatalf("request %d: status %d, want 200", i, w.Code)
		}
		if got, want := w.Header().Get("X-RateLimit-Remaining"), strconv.Itoa(1-i); got != want {
			t.Fatalf("request %d: X-RateLimit-Remaining %q, want %q", i, got, want)
		}
		if w.Header().Get("RateLimit-Policy") != `"api.burst";q=2;w=5` {
			t.Fatalf("RateLimit-Policy = %q", w.Header().Get("RateLimit-Policy"))
		}
	}
	w := get(h, nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: status %d, want 429", w.Code)
	}
	// One token refills in 2.5s at 0.4/s: Retry-After is 3 (rounded up), the
	// body carries the exact 2500ms.
	if got := w.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("Retry-After = %q, want 3", got)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var p middleware.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "about:blank" || p.Title != "Too Many Requests" || p.Status != 429 || p.RetryAfterMs != 2500 || !strings.Contains(p.Detail, "2.5s") {
		t.Fatalf("problem = %+v", p)
	}
	if app.n.Load() != 2 {
		t.Fatalf("application saw %d requests, want 2", app.n.Load())
	}
	// Another client has its own bucket.
	if w := get(h, func(r *http.Request) { r.RemoteAddr = "198.51.100.1:1" }); w.Code != 200 {
		t.Fatalf("other client: status %d, want 200", w.Code)
	}
}

func TestMiddlewareCost(t *testing.T) {
	h := mustMiddleware(t, middleware.Options{
		Store: newMemory(t), Name: "api",
		Limits: []sluice.Limit{sluice.FixedWindow(10, time.Minute).Named("minute")},
		Cost: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			return n
		},
	})(&served{})
	tests := []struct {
		query      string
		wantStatus int
		wantLeft   string
	}{
		{"n=6", 200, "4"},
		{"n=5", 429, "4"}, // a deny consumes nothing
		{"n=0", 200, "4"}, // a peek
		{"n=4", 200, "0"},
		{"n=11", 400, ""}, // can never fit: an input error, not a deny
		{"n=-1", 400, ""},
	}
	for _, tt := range tests {
		w := get(h, func(r *http.Request) { r.URL.RawQuery = tt.query })
		if w.Code != tt.wantStatus || w.Header().Get("X-RateLimit-Remaining") != tt.wantLeft {
			t.Fatalf("%s: status %d remaining %q, want %d %q (%s)", tt.query, w.Code, w.Header().Get("X-RateLimit-Remaining"), tt.wantStatus, tt.wantLeft, w.Body)
		}
		if tt.wantStatus == 400 && !strings.Contains(w.Body.String(), "never fit") && !strings.Contains(w.Body.String(), "negative") {
			t.Fatalf("%s: body %s does not say what is wrong", tt.query, w.Body)
		}
	}
}

func TestMiddlewareEmptyKey(t *testing.T) {
	limits := []sluice.Limit{sluice.FixedWindow(1, time.Minute).Named("minute")}
	noKey := func(r *http.Request) {}
	withKey := func(k string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("X-API-Key", k) } }

	t.Run("shares_one_bucket_by_default", func(t *testing.T) {
		h := mustMiddleware(t, middleware.Options{Store: newMemory(t), Name: "api", Limits: limits, Key: middleware.Header("X-API-Key")})(&served{})
		if w := get(h, noKey); w.Code != 200 {
			t.Fatalf("first keyless: %d", w.Code)
		}
		if w := get(h, func(r *http.Request) { r.RemoteAddr = "198.51.100.1:1" }); w.Code != 429 {
			t.Fatalf("second keyless from another address: %d, want 429 (shared bucket)", w.Code)
		}
		if w := get(h, withKey("k1")); w.Code != 200 {
			t.Fatalf("keyed request: %d, want 200", w.Code)
		}
	})
	t.Run("rejected_with_400_when_asked", func(t *testing.T) {
		app := &served{}
		h := mustMiddleware(t, middleware.Options{Store: newMemory(t), Name: "api", Limits: limits, Key: middleware.Header("X-API-Key"), RejectEmptyKey: true})(app)
		w := get(h, noKey)
		if w.Code != 400 || w.Header().Get("Content-Type") != "application/problem+json" || app.n.Load() != 0 {
			t.Fatalf("keyless: %d %s, app saw %d", w.Code, w.Body, app.n.Load())
		}
		if w := get(h, withKey("k1")); w.Code != 200 {
			t.Fatalf("keyed request: %d", w.Code)
		}
	})
}

func TestMiddlewareCustomDenyHandler(t *testing.T) {
	h := mustMiddleware(t, middleware.Options{
		Store: newMemory(t), Name: "api",
		Limits: []sluice.Limit{sluice.FixedWindow(1, time.Minute).Named("minute")},
		DenyHandler: func(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("slow down, retry in " + d.RetryAfter.String()))
		},
	})(&served{})
	get(h, nil)
	w := get(h, nil)
	if w.Code != 503 || !strings.HasPrefix(w.Body.String(), "slow down") || w.Header().Get("Retry-After") == "" {
		t.Fatalf("custom deny: %d %q Retry-After %q", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}

func TestMiddlewareRejectsBadOptions(t *testing.T) {
	limits := []sluice.Limit{sluice.PerSecond(1)}
	tests := []struct {
		name string
		opts middleware.Options
		want string
	}{
		{"no_store", middleware.Options{Name: "api", Limits: limits}, "exactly one of Store"},
		{"no_name", middleware.Options{Store: memory.New(memory.Options{}), Limits: limits}, "Name is required"},
		{"no_limits", middleware.Options{Store: memory.New(memory.Options{}), Name: "api"}, "at least one limit"},
		{"bad_mode", middleware.Options{Store: memory.New(memory.Options{}), Name: "api", Limits: limits, FailureMode: "maybe"}, "failure mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := middleware.New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestMiddlewareMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := mustMiddleware(t, middleware.Options{
		Store: newMemory(t), Name: "api", Metrics: metrics.New(reg),
		Limits: []sluice.Limit{sluice.FixedWindow(1, time.Minute).Named("minute")},
	})(&served{})
	get(h, nil)
	get(h, nil)
	want := `
# HELP sluice_decisions_total Rate-limit decisions, by source (http, envoy, gateway, middleware), tenant (HTTP service), domain (Envoy), rule and result (allowed, denied, degraded, shadow_denied, shed, no_rule, error).
# TYPE sluice_decisions_total counter
sluice_decisions_total{domain="",result="allowed",rule="api",source="middleware",tenant=""} 1
sluice_decisions_total{domain="",result="denied",rule="api",source="middleware",tenant=""} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total"); err != nil {
		t.Fatal(err)
	}
}

// TestMiddlewareOnRedis runs two middleware instances, as two API servers
// would, on one real Redis.
func TestMiddlewareOnRedis(t *testing.T) {
	srv := testenv.Redis(t)
	open := func() *sluiceredis.Store {
		s, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	limits := []sluice.Limit{sluice.FixedWindow(25, time.Hour).Named("hour")}

	t.Run("two_instances_admit_exactly_the_limit", func(t *testing.T) {
		app := &served{}
		// Exactness, not deadlines, is under test: on a loaded machine a
		// store call may miss the usual 50ms, and this rule fails open.
		slow := guard.Options{Timeout: 10 * time.Second}
		a := mustMiddleware(t, middleware.Options{Store: open(), Name: "shared", Limits: limits, Guard: slow})(app)
		b := mustMiddleware(t, middleware.Options{Store: open(), Name: "shared", Limits: limits, Guard: slow})(app)
		var wg sync.WaitGroup
		var allowed, denied atomic.Int64
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := a
				if i%2 == 1 {
					h = b
				}
				switch w := get(h, nil); w.Code {
				case 200:
					allowed.Add(1)
				case 429:
					denied.Add(1)
				default:
					t.Errorf("status %d: %s", w.Code, w.Body)
				}
			}()
		}
		wg.Wait()
		if allowed.Load() != 25 || denied.Load() != 75 || app.n.Load() != 25 {
			t.Fatalf("allowed %d denied %d app saw %d, want exactly 25/75/25", allowed.Load(), denied.Load(), app.n.Load())
		}
	})

	t.Run("failure_modes_with_redis_stopped", func(t *testing.T) {
		store := open()
		handlers := map[sluice.FailureMode]http.Handler{}
		for _, mode := range []sluice.FailureMode{"", sluice.FailClosed, sluice.FailLocal} {
			handlers[mode] = mustMiddleware(t, middleware.Options{
				Store: store, Name: "outage-" + string(mode), FailureMode: mode,
				Limits: []sluice.Limit{sluice.FixedWindow(2, time.Hour).Named("hour")},
			})(&served{})
		}
		srv.Stop()
		defer srv.Start()

		for i := range 3 {
			w := get(handlers[""], nil)
			if w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "" {
				t.Fatalf("default (open) request %d: %d with headers %v, want 200 without rate-limit headers", i, w.Code, w.Header())
			}
		}
		w := get(handlers[sluice.FailClosed], nil)
		var p middleware.Problem
		json.Unmarshal(w.Body.Bytes(), &p)
		if w.Code != 503 || w.Header().Get("Retry-After") != "1" || p.Status != 503 {
			t.Fatalf("closed: %d Retry-After %q body %s, want 503 with Retry-After 1", w.Code, w.Header().Get("Retry-After"), w.Body)
		}
		var codes []int
		for range 3 {
			codes = append(codes, get(handlers[sluice.FailLocal], nil).Code)
		}
		if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
			t.Fatalf("local: statuses %v, want 200 200 429 from the in-process limit", codes)
		}
	})
}

func TestProblemHasNoRetryWhenNotADeny(t *testing.T) {
	w := httptest.NewRecorder()
	middleware.WriteProblem(w, 400, "bad", 0)
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"type", "title", "status", "detail", "retry_after_ms"} {
		if _, ok := p[field]; !ok {
			t.Fatalf("problem lacks %q: %s", field, w.Body)
		}
	}
	if p["retry_after_ms"] != 0.0 {
		t.Fatalf("retry_after_ms = %v, want 0", p["retry_after_ms"])
	}
}
