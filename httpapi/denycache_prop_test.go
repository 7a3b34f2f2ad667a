package httpapi

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// recordingStore passes every call to a real store, counting the checks that
// reach it and remembering the last one.
type recordingStore struct {
	sluice.Store
	mu     sync.Mutex
	checks int
	last   sluice.Request
}

func (s *recordingStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s.mu.Lock()
	s.checks++
	s.last = req
	s.mu.Unlock()
	return s.Store.Check(ctx, req)
}

func (s *recordingStore) calls() (int, sluice.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks, s.last
}

// propClock is the one clock of a property run: the engine's deny cache and
// the memory store read it, and only the test moves it.
type propClock struct{ ns atomic.Int64 }

func (c *propClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *propClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// propRule is the test's own record of a rule it put: what the store must be
// asked under.
type propRule struct {
	name, route string
	limits      []sluice.Limit
}

// TestDenyCacheIsExactThroughHTTP is the deny cache's property test
// (check.TestDenyCacheIsExact) run through POST /v1/check over a real
// (SQLite) catalog: random sequences of checks, time steps, rule
// replacements (PUT, and DELETE then PUT, through the admin API) and subject
// resets (DELETE .../subjects/{subject}). Every 429 answered without a store
// call came from the deny cache; the store is then asked the same check at
// the same time, and must deny it too, with a wait no shorter than the one
// answered.
func TestDenyCacheIsExactThroughHTTP(t *testing.T) {
	ctx := context.Background()
	catalog, secret := catalogtest.SQLiteTenant(t)
	if err := catalog.SetAdminTokenHash(ctx, sluice.HashAPIKey(testAdminToken)); err != nil {
		t.Fatal(err)
	}
	tenant, err := catalog.Tenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	namespace := tenant.Name + "#" + strconv.FormatInt(tenant.Generation, 10)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The runs share the catalog and its two rules (each run puts the
	// limits it draws); each has a fresh store, engine and API.
	stored := map[string][]sluice.Limit{}
	// Admin writes and snapshot reloads cost milliseconds each (far more
	// under -race), so fewer, longer runs than rapid's default.
	limitRapidChecks(t, 25)
	totalHits, totalResets, totalChanges := 0, 0, 0
	rapid.Check(t, func(t *rapid.T) {
		clock := &propClock{}
		clock.ns.Store(time.UnixMilli(1_700_000_000_000).UnixNano())
		mem := memory.New(memory.Options{Clock: clock.Now})
		defer mem.Close()
		store := &recordingStore{Store: mem}
		// A cache large enough never to evict: which entry a full shard
		// drops depends on a random hash seed, and a failure must replay
		// the same way. Eviction is check.TestDenyCacheIsExact's business.
		// No store deadline to miss on a loaded machine either: the memory
		// store never hangs, and a timeout is not what this test is about.
		engine := check.New(store, check.Options{Clock: clock.Now, Guard: guard.Options{Timeout: time.Minute}})
		defer engine.Close()
		// The rules are in the catalog before the API reads it, so a run
		// never depends on what the one before left there.
		rules := []*propRule{
			{name: "a", route: "/a*", limits: storetest.DrawSmallLimits(t)},
			{name: "b", route: "/b*", limits: storetest.DrawSmallLimits(t)},
		}
		for _, r := range rules {
			if !reflect.DeepEqual(stored[r.name], r.limits) {
				rule := sluice.Rule{Tenant: "acme", Name: r.name, Route: r.route, Limits: r.limits, FailureMode: sluice.FailClosed}
				if _, err := catalog.PutRule(ctx, rule); err != nil {
					t.Fatal(err)
				}
				stored[r.name] = r.limits
			}
		}
		api, err := New(ctx, Options{Catalog: catalog, Engine: engine, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		bindOpenAPI(t, api)
		handler := api.Handler()
		call := func(method, path, auth, body string) *httptest.ResponseRecorder {
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body)
			}
			req := httptest.NewRequest(method, path, rd)
			req.Header.Set("Authorization", "Bearer "+auth)
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			return rec
		}
		rulePath := func(r *propRule) string { return "/v1/tenants/acme/rules/" + r.name }
		put := func(r *propRule) {
			body := adminapi.RuleSpec{Route: r.route, Limits: adminapi.NewLimits(r.limits)}
			data, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if rec := call("PUT", rulePath(r), testAdminToken, string(data)); rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
				t.Fatalf("PUT %s: %d %s", r.name, rec.Code, rec.Body)
			}
			stored[r.name] = r.limits
		}

		hits, storeAnswered := 0, 0
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			r := rapid.SampledFrom(rules).Draw(t, "rule")
			subject := rapid.SampledFrom([]string{"u1", "x/y"}).Draw(t, "subject")
			// rapid draws small numbers most often: those are checks.
			switch op := rapid.IntRange(0, 29).Draw(t, "op"); {
			case op >= 24 && op < 28: // the rule is replaced, with the same or new limits
				if rapid.Bool().Draw(t, "newLimits") {
					r.limits = storetest.DrawSmallLimits(t)
				}
				if rapid.Bool().Draw(t, "deleteFirst") {
					if rec := call("DELETE", rulePath(r), testAdminToken, ""); rec.Code != http.StatusNoContent {
						t.Fatalf("DELETE %s: %d %s", r.name, rec.Code, rec.Body)
					}
				}
				put(r)
				totalChanges++
			case op >= 28: // an operator resets the subject
				rec := call("DELETE", rulePath(r)+"/subjects/"+url.PathEscape(subject), testAdminToken, "")
				if rec.Code != http.StatusNoContent {
					t.Fatalf("reset %s of %s: %d %s", subject, r.name, rec.Code, rec.Body)
				}
				totalResets++
			default:
				// Mostly short steps, so denies are frequent and repeated.
				clock.Advance(time.Duration(rapid.SampledFrom([]int{0, 0, 1, 10, 50, 100, 250, 700}).Draw(t, "advanceMs")) * time.Millisecond)
				cost := int64(rapid.SampledFrom([]int{1, 1, 2, 1, 3, 2, 6, 0}).Draw(t, "cost"))
				before, _ := store.calls()
				body := fmt.Sprintf(`{"route": %q, "subject": %q, "cost": %d}`, strings.TrimSuffix(r.route, "*")+"/1", subject, cost)
				rec := call("POST", "/v1/check", secret, body)
				after, sent := store.calls()
				want := sluice.Request{Tenant: namespace, Rule: r.name, Subject: subject, Limits: r.limits, Cost: cost}
				if req := want; req.Validate() != nil {
					if rec.Code != http.StatusBadRequest {
						t.Fatalf("check of cost %d under %v: %d %s, want 400", cost, r.limits, rec.Code, rec.Body)
					}
					continue
				}
				if after > before {
					// The store answered: the test must know the engine's
					// request exactly, to ask the same itself.
					storeAnswered++
					if after != before+1 || !reflect.DeepEqual(sent, want) {
						t.Fatalf("%d store calls, the last %+v; the test expected one, %+v", after-before, sent, want)
					}
				}
				var d checkapi.Decision
				if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
					t.Fatalf("check answered %d %s", rec.Code, rec.Body)
				}
				switch {
				case rec.Code == http.StatusOK && d.Allowed:
					continue
				case rec.Code != http.StatusTooManyRequests || d.Allowed:
					t.Fatalf("check answered %d %s", rec.Code, rec.Body)
				case after > before:
					continue // a deny of the store's own
				}
				// Denied without a store call: by the deny cache.
				hits++
				req := want
				req.Now = clock.Now()
				sd, err := mem.Check(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if sd.Allowed {
					t.Fatalf("%s: the deny cache denied cost %d for %q at %v, which the store allows (%+v)", r.name, cost, subject, req.Now, sd)
				}
				// Every figure is the store's (issue 26), the headers too.
				if storeSays := checkapi.NewDecision(r.name, sd, false); !reflect.DeepEqual(d, storeSays) {
					t.Fatalf("%s: cost %d for %q: the deny cache said\n%+v\nthe store\n%+v", r.name, cost, subject, d, storeSays)
				}
				header, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
				if err != nil || header != ratelimitheader.RetryAfterSeconds(sd.RetryAfter) {
					t.Fatalf("%s: the deny cache said Retry-After %q, the store %v", r.name, rec.Header().Get("Retry-After"), sd.RetryAfter)
				}
			}
		}
		if storeAnswered == 0 && hits > 0 {
			t.Fatal("cache hits without a store call ever answered")
		}
		totalHits += hits
	})
	// Enough to mean something: 25 runs see fifty to a hundred or more.
	floor := 20
	if testing.Short() {
		// rapid then runs a fifth of the sequences, which may see fewer
		// than 20 hits (a flake before issue 26 already): one will do.
		floor = 1
	}
	if totalHits < floor {
		t.Errorf("the deny cache answered %d checks: the test proves little", totalHits)
	}
	t.Logf("%d checks answered by the deny cache; %d rule replacements, %d subject resets", totalHits, totalChanges, totalResets)
}

// limitRapidChecks lowers rapid's number of checks to n for t, unless
// -rapid.checks (or RAPID_CHECKS) asked for a number of its own.
func limitRapidChecks(t *testing.T, n int) {
	f := flag.Lookup("rapid.checks")
	if f == nil || f.Value.String() != f.DefValue || os.Getenv("RAPID_CHECKS") != "" {
		return
	}
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
}
