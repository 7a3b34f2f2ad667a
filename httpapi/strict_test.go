package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/sqlite"
)

func TestStrictJSONOnAdminBodies(t *testing.T) {
	limit := `{"name": "burst", "algorithm": "token_bucket", "capacity": 10, "refill_per_second": 1}`
	cases := []struct {
		name, body string
		code       string // "" when the body is accepted
		says       string // part of the message
	}{
		{"plain", `{"route": "/a", "limits": [` + limit + `]}`, "", ""},
		{"escaped_names_are_exact_names", `{"r\u006fute": "/a", "limits": [` + limit + `]}`, "", ""},
		{"top_level_case", `{"Route": "/a", "limits": [` + limit + `]}`, "unknown_field", `"Route"; field names are case-sensitive (did you mean "route"?)`},
		{"nested_case", `{"route": "/a", "limits": [{"name": "b", "algorithm": "token_bucket", "CAPACITY": 1, "refill_per_second": 1}]}`, "unknown_field", `"limits[0].CAPACITY"`},
		{"top_level_duplicate", `{"route": "/a", "route": "/b", "limits": [` + limit + `]}`, "duplicate_field", `Field "route" appears more than once`},
		{"nested_duplicate", `{"route": "/a", "limits": [` + limit + `, {"name": "x", "name": "y"}]}`, "duplicate_field", `Field "limits[1].name"`},
		{"nested_nul", `{"route": "/a", "limits": [{"name": "b\u0000", "algorithm": "token_bucket"}]}`, "invalid_request", `Field "limits[0].name" contains a NUL`},
		{"invalid_utf8_value", "{\"route\": \"/a\xc3\", \"limits\": []}", "invalid_request", `Field "route" is not valid UTF-8`},
		{"unpaired_surrogate", `{"route": "/a", "failure_mode": "\udfff"}`, "invalid_request", `Field "failure_mode" is not valid Unicode`},
		{"strings_inside_unknown_fields_too", `{"route": "/a", "x": {"y": "\u0000"}}`, "invalid_request", `Field "x.y"`},
		{"syntax_errors_stay_encoding_json_s", `{"route": "/a", "route": }`, "malformed_json", "not valid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in adminapi.RuleSpec
			aerr := decodeBytes([]byte(c.body), &in)
			if c.code == "" {
				if aerr != nil {
					t.Fatalf("refused: %v", aerr)
				}
				return
			}
			if aerr == nil || aerr.status != http.StatusBadRequest || aerr.code != c.code || !strings.Contains(aerr.message, c.says) {
				t.Fatalf("got %+v, want 400 %s saying %s", aerr, c.code, c.says)
			}
			if !strings.HasSuffix(aerr.message, ".") {
				t.Errorf("message %q is not a sentence", aerr.message)
			}
		})
	}
}

// spyCatalog passes every call to a real catalog after before (if set)
// had its say, and counts the calls.
type spyCatalog struct {
	sluice.Catalog
	mu     sync.Mutex
	calls  []string
	before func(ctx context.Context, method string) error
}

func (s *spyCatalog) hook(ctx context.Context, method string) error {
	s.mu.Lock()
	s.calls = append(s.calls, method)
	before := s.before
	s.mu.Unlock()
	if before != nil {
		return before(ctx, method)
	}
	return nil
}

func (s *spyCatalog) setBefore(fn func(ctx context.Context, method string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.before = fn
}

func (s *spyCatalog) takeCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func (s *spyCatalog) Tenant(ctx context.Context, name string) (sluice.Tenant, error) {
	if err := s.hook(ctx, "Tenant"); err != nil {
		return sluice.Tenant{}, err
	}
	return s.Catalog.Tenant(ctx, name)
}

func (s *spyCatalog) Tenants(ctx context.Context) ([]sluice.Tenant, error) {
	if err := s.hook(ctx, "Tenants"); err != nil {
		return nil, err
	}
	return s.Catalog.Tenants(ctx)
}

func (s *spyCatalog) Rule(ctx context.Context, tenant, name string) (sluice.Rule, error) {
	if err := s.hook(ctx, "Rule"); err != nil {
		return sluice.Rule{}, err
	}
	return s.Catalog.Rule(ctx, tenant, name)
}

func (s *spyCatalog) Rules(ctx context.Context, tenant string) ([]sluice.Rule, error) {
	if err := s.hook(ctx, "Rules"); err != nil {
		return nil, err
	}
	return s.Catalog.Rules(ctx, tenant)
}

func (s *spyCatalog) Keys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	if err := s.hook(ctx, "Keys"); err != nil {
		return nil, err
	}
	return s.Catalog.Keys(ctx, tenant)
}

func (s *spyCatalog) PutRule(ctx context.Context, rule sluice.Rule) (sluice.Rule, error) {
	if err := s.hook(ctx, "PutRule"); err != nil {
		return sluice.Rule{}, err
	}
	return s.Catalog.PutRule(ctx, rule)
}

func (s *spyCatalog) CreateKey(ctx context.Context, tenant, name string, role sluice.Role, hash []byte) (sluice.APIKey, error) {
	if err := s.hook(ctx, "CreateKey"); err != nil {
		return sluice.APIKey{}, err
	}
	return s.Catalog.CreateKey(ctx, tenant, name, role, hash)
}

func (s *spyCatalog) RecordReset(ctx context.Context, tenant, rule, subject string) error {
	if err := s.hook(ctx, "RecordReset"); err != nil {
		return err
	}
	return s.Catalog.RecordReset(ctx, tenant, rule, subject)
}

func (s *spyCatalog) PublishReset(ctx context.Context, tenant, rule, subject string) error {
	if err := s.hook(ctx, "PublishReset"); err != nil {
		return err
	}
	return s.Catalog.PublishReset(ctx, tenant, rule, subject)
}

func (s *spyCatalog) Snapshot(ctx context.Context) (*sluice.Snapshot, error) {
	if err := s.hook(ctx, "Snapshot"); err != nil {
		return nil, err
	}
	return s.Catalog.Snapshot(ctx)
}

func (s *spyCatalog) Version(ctx context.Context) (int64, error) {
	if err := s.hook(ctx, "Version"); err != nil {
		return 0, err
	}
	return s.Catalog.Version(ctx)
}

// spyAPI is an API over a SQLite catalog (tenant acme, one check key, rule
// payments: one request per hour) seen through a spyCatalog, and a memory
// store.
type spyAPI struct {
	api     *API
	handler http.Handler
	catalog *spyCatalog
	store   *memory.Store
	key     string
}

func newSpyAPI(t *testing.T, opts Options) *spyAPI {
	t.Helper()
	ctx := context.Background()
	real, key := catalogtest.SQLiteTenant(t, sluice.Rule{Tenant: "acme", Name: "payments", Route: "/api/payments*",
		Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour)}, FailureMode: sluice.FailClosed})
	if err := real.SetAdminTokenHash(ctx, sluice.HashAPIKey(testAdminToken)); err != nil {
		t.Fatal(err)
	}
	spy := &spyCatalog{Catalog: real}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	engine := check.New(store, check.Options{})
	t.Cleanup(func() { engine.Close() })
	opts.Catalog, opts.Engine = spy, engine
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	api, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	spy.takeCalls()
	bindOpenAPI(t, api)
	return &spyAPI{api: api, handler: api.Handler(), catalog: spy, store: store, key: key}
}

func (s *spyAPI) do(method, target, auth, body string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	return rec
}

// TestResetValidatesBeforeTouchingAnything sends resets whose path values
// the catalog could not store: each must be a 400 naming the value, with no
// catalog call at all (so neither the store nor the deny cache was reached:
// the handler calls them only after reading the tenant and the rule).
func TestResetValidatesBeforeTouchingAnything(t *testing.T) {
	s := newSpyAPI(t, Options{})
	// Fill the subject's window so a reset would show.
	if rec := s.do("POST", "/v1/check", s.key, `{"route": "/api/payments", "subject": "u"}`); rec.Code != http.StatusOK {
		t.Fatalf("check: %d %s", rec.Code, rec.Body)
	}
	s.catalog.takeCalls()
	for _, c := range []struct{ name, path, says string }{
		{"nul_subject", "/v1/tenants/acme/rules/payments/subjects/u%00", "The subject contains a NUL"},
		{"invalid_utf8_subject", "/v1/tenants/acme/rules/payments/subjects/u%FF", "The subject is not valid UTF-8"},
		{"long_subject", "/v1/tenants/acme/rules/payments/subjects/" + strings.Repeat("u", MaxRequestSubjectBytes+1), "at most 1024"},
		{"nul_tenant", "/v1/tenants/acme%00/rules/payments/subjects/u", "Tenant name"},
		{"nul_rule", "/v1/tenants/acme/rules/pay%00ments/subjects/u", "Rule name"},
		{"invalid_utf8_rule", "/v1/tenants/acme/rules/pay%C3/subjects/u", "Rule name"},
		{"nul_key_id", "/v1/tenants/acme/keys/key%00", "The key ID contains a NUL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			method := "DELETE"
			rec := s.do(method, c.path, testAdminToken, "")
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"invalid_request"`) || !strings.Contains(rec.Body.String(), c.says) {
				t.Errorf("got %d %s, want 400 invalid_request saying %q", rec.Code, rec.Body, c.says)
			}
			if calls := s.catalog.takeCalls(); len(calls) != 0 {
				t.Errorf("catalog called before the path was validated: %v", calls)
			}
		})
	}
	// The subject's window is still full: nothing was reset.
	if rec := s.do("POST", "/v1/check", s.key, `{"route": "/api/payments", "subject": "u"}`); rec.Code != http.StatusTooManyRequests {
		t.Errorf("after the refused resets, check: %d %s, want 429", rec.Code, rec.Body)
	}
	// A valid reset does reset (the control).
	if rec := s.do("DELETE", "/v1/tenants/acme/rules/payments/subjects/u", testAdminToken, ""); rec.Code != http.StatusNoContent {
		t.Fatalf("valid reset: %d %s", rec.Code, rec.Body)
	}
	if rec := s.do("POST", "/v1/check", s.key, `{"route": "/api/payments", "subject": "u"}`); rec.Code != http.StatusOK {
		t.Errorf("after the reset, check: %d %s, want 200", rec.Code, rec.Body)
	}
}

// refusedError is what a catalog driver returns when the database refuses
// the connection: a real *net.OpError, wrapped as pgx wraps it.
func refusedError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		t.Skip("the closed port accepted a connection")
	}
	return fmt.Errorf("failed to connect to `host=127.0.0.1 user=sluice database=sluice`: %w", err)
}

// sqlStateError is a server error with a SQLSTATE, like pgconn.PgError.
type sqlStateError struct{ code string }

func (e *sqlStateError) Error() string {
	return "FATAL: the database system is shutting down (SQLSTATE " + e.code + ")"
}
func (e *sqlStateError) SQLState() string { return e.code }

// TestAdminCallsHaveTheirOwnDeadline runs admin calls against a catalog that
// hangs until its context ends, refuses connections, or is shutting down:
// each must answer 503 catalog_unavailable with Retry-After, within the
// admin deadline, never 500 or an empty reply.
func TestAdminCallsHaveTheirOwnDeadline(t *testing.T) {
	const adminTimeout = 200 * time.Millisecond
	s := newSpyAPI(t, Options{AdminTimeout: adminTimeout})
	refused := refusedError(t)
	rule := `{"route": "/api/x*", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`
	calls := []struct{ method, path, body string }{
		{"GET", "/v1/tenants", ""},
		{"GET", "/v1/tenants/acme", ""},
		{"GET", "/v1/tenants/acme/rules", ""},
		{"GET", "/v1/tenants/acme/keys", ""},
		{"PUT", "/v1/tenants/acme/rules/x", rule},
		{"POST", "/v1/tenants/acme/keys", `{"role": "check"}`},
		{"DELETE", "/v1/tenants/acme/rules/payments/subjects/u", ""},
	}
	for _, mode := range []struct {
		name   string
		before func(ctx context.Context, method string) error
	}{
		{"hung", func(ctx context.Context, method string) error {
			<-ctx.Done()
			return fmt.Errorf("read: %w", ctx.Err())
		}},
		{"refused", func(context.Context, string) error { return refused }},
		{"shutting_down", func(context.Context, string) error { return &sqlStateError{"57P01"} }},
	} {
		s.catalog.setBefore(mode.before)
		for _, c := range calls {
			t.Run(mode.name+"/"+c.method+c.path, func(t *testing.T) {
				start := time.Now()
				rec := s.do(c.method, c.path, testAdminToken, c.body)
				took := time.Since(start)
				if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"catalog_unavailable"`) ||
					rec.Header().Get("Retry-After") == "" {
					t.Errorf("got %d %v %s, want 503 catalog_unavailable with Retry-After", rec.Code, rec.Header(), rec.Body)
				}
				if c.method != "GET" && !strings.Contains(rec.Body.String(), "may have been made") && !strings.Contains(rec.Body.String(), "counters were reset") {
					t.Errorf("a write's 503 does not say the change may have been made: %s", rec.Body)
				}
				// Loose, for loaded machines: the point is a deadline well
				// inside the server's 15 s write timeout.
				if took > adminTimeout+2*time.Second {
					t.Errorf("took %v, want about the admin deadline (%v)", took, adminTimeout)
				}
			})
		}
	}
	s.catalog.setBefore(nil)
	if rec := s.do("GET", "/v1/tenants/acme", testAdminToken, ""); rec.Code != http.StatusOK {
		t.Errorf("catalog back: %d %s", rec.Code, rec.Body)
	}
}

// TestResetThatCannotBePublishedSaysSo: the store is reset, but other
// instances cannot be told; the answer says exactly that.
func TestResetThatCannotBePublishedSaysSo(t *testing.T) {
	s := newSpyAPI(t, Options{AdminTimeout: 200 * time.Millisecond})
	refused := refusedError(t)
	s.catalog.setBefore(func(_ context.Context, method string) error {
		if method == "PublishReset" {
			return refused
		}
		return nil
	})
	rec := s.do("DELETE", "/v1/tenants/acme/rules/payments/subjects/u", testAdminToken, "")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "counters were reset, but") ||
		strings.Contains(rec.Body.String(), "read it back") {
		t.Errorf("got %d %s, want 503 saying the counters were reset but others were not told", rec.Code, rec.Body)
	}
}

// TestResetThatCannotBeRecordedResetsNothing: the audit entry is written
// before the counters are touched, so a catalog that refuses it leaves the
// subject's counters as they were and answers 503 catalog_unavailable.
func TestResetThatCannotBeRecordedResetsNothing(t *testing.T) {
	s := newSpyAPI(t, Options{AdminTimeout: 200 * time.Millisecond})
	check := func() int {
		return s.do("POST", "/v1/check", s.key, `{"route": "/api/payments", "subject": "u"}`).Code
	}
	if code := check(); code != http.StatusOK {
		t.Fatalf("first check: %d", code)
	}
	if code := check(); code != http.StatusTooManyRequests {
		t.Fatalf("second check of a limit of 1: %d, want 429", code)
	}
	refused := refusedError(t)
	s.catalog.setBefore(func(_ context.Context, method string) error {
		if method == "RecordReset" {
			return refused
		}
		return nil
	})
	rec := s.do("DELETE", "/v1/tenants/acme/rules/payments/subjects/u", testAdminToken, "")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"catalog_unavailable"`) {
		t.Errorf("reset with the audit refused: %d %s, want 503 catalog_unavailable", rec.Code, rec.Body)
	}
	s.catalog.setBefore(nil)
	if code := check(); code != http.StatusTooManyRequests {
		t.Errorf("after a reset the catalog could not record, a check answered %d: the counters were reset without an entry", code)
	}
	if rec := s.do("DELETE", "/v1/tenants/acme/rules/payments/subjects/u", testAdminToken, ""); rec.Code != http.StatusNoContent {
		t.Fatalf("reset with the catalog back: %d %s", rec.Code, rec.Body)
	}
	if code := check(); code != http.StatusOK {
		t.Errorf("after a recorded reset: %d, want 200", code)
	}
}

func TestCatalogUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{refusedError(t), true},
		{&net.DNSError{Err: "no such host", Name: "db"}, true},
		{&sqlStateError{"08006"}, true},
		{&sqlStateError{"53300"}, true},
		{&sqlStateError{"57P03"}, true},
		{&sqlStateError{"23505"}, false},
		{errors.New("boom"), false},
		{fmt.Errorf("tenant: %w", sluice.ErrNotFound), false},
	} {
		if got := catalogUnavailable(c.err); got != c.want {
			t.Errorf("catalogUnavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// readyz asks /readyz afresh (past the cache) and decodes the answer.
func (s *spyAPI) readyz(t *testing.T, fresh bool) (int, map[string]any) {
	t.Helper()
	if fresh {
		s.api.ready.mu.Lock()
		s.api.ready.body = nil
		s.api.ready.mu.Unlock()
	}
	rec := s.do("GET", "/readyz", "", "")
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("readyz: %d %q is not JSON", rec.Code, rec.Body)
	}
	return rec.Code, body
}

func TestReadyzIsAboutAnsweringChecks(t *testing.T) {
	ctx := context.Background()
	var pings atomic.Int64
	var storeDown atomic.Bool
	s := newSpyAPI(t, Options{StorePing: func(ctx context.Context) error {
		pings.Add(1)
		if storeDown.Load() {
			return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
		}
		return nil
	}})
	versionCalls := func() int {
		n := 0
		for _, c := range s.catalog.takeCalls() {
			if c == "Version" {
				n++
			}
		}
		return n
	}

	t.Run("all_well", func(t *testing.T) {
		status, body := s.readyz(t, true)
		if status != http.StatusOK || body["status"] != "ready" || body["store"] != "ok" || body["catalog"] != "current" {
			t.Errorf("got %d %v", status, body)
		}
		if age, ok := body["snapshot_age_seconds"].(float64); !ok || age < 0 || age > 1 {
			t.Errorf("snapshot_age_seconds = %v, want about 0", body["snapshot_age_seconds"])
		}
	})

	t.Run("probes_are_answered_from_a_cache", func(t *testing.T) {
		s.readyz(t, true)
		pings.Store(0)
		versionCalls()
		for range 50 {
			if status, _ := s.readyz(t, false); status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
		}
		if p, v := pings.Load(), versionCalls(); p != 0 || v != 0 {
			t.Errorf("50 probes within the cache interval: %d pings, %d catalog queries; want 0 and 0", p, v)
		}
	})

	t.Run("catalog_hung_is_ready_and_stale", func(t *testing.T) {
		s.catalog.setBefore(func(ctx context.Context, method string) error {
			<-ctx.Done()
			return ctx.Err()
		})
		defer s.catalog.setBefore(nil)
		time.Sleep(50 * time.Millisecond) // let the snapshot age show
		start := time.Now()
		status, body := s.readyz(t, true)
		if took := time.Since(start); took > readyProbeTimeout+time.Second {
			t.Errorf("readyz took %v with the catalog hung", took)
		}
		if status != http.StatusOK || body["catalog"] != "stale" || body["snapshot_age_seconds"].(float64) < 0.05 {
			t.Errorf("got %d %v, want 200, catalog stale, an age of at least 0.05", status, body)
		}
	})

	t.Run("store_down_with_a_rule_failing_closed", func(t *testing.T) {
		storeDown.Store(true)
		defer storeDown.Store(false)
		status, body := s.readyz(t, true)
		e, _ := body["error"].(map[string]any)
		if status != http.StatusServiceUnavailable || e["code"] != "store_unavailable" || !strings.Contains(e["message"].(string), "1 of this instance's rules fail closed") {
			t.Errorf("got %d %v, want 503 store_unavailable", status, body)
		}
	})

	t.Run("store_down_with_every_rule_covered", func(t *testing.T) {
		rule, err := s.catalog.Rule(ctx, "acme", "payments")
		if err != nil {
			t.Fatal(err)
		}
		rule.FailureMode = sluice.FailLocal
		if _, err := s.catalog.PutRule(ctx, rule); err != nil {
			t.Fatal(err)
		}
		open := sluice.Rule{Tenant: "acme", Name: "orders", Route: "/api/orders*", FailureMode: sluice.FailOpen,
			Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour)}}
		if _, err := s.catalog.PutRule(ctx, open); err != nil {
			t.Fatal(err)
		}
		if err := s.api.reload(ctx); err != nil {
			t.Fatal(err)
		}
		storeDown.Store(true)
		defer storeDown.Store(false)
		status, body := s.readyz(t, true)
		if status != http.StatusOK || body["store"] != "unavailable" {
			t.Errorf("got %d %v, want 200 with the store unavailable", status, body)
		}
	})
}

func TestTenantCaps(t *testing.T) {
	// The catalog enforces the caps (its contract test races them); this is
	// how the API answers one.
	s := newSpyAPI(t, Options{})
	s.catalog.Catalog.(*sqlite.Catalog).SetTenantCaps(sluice.TenantCaps{Rules: 2, Keys: 2}) // acme has 1 rule, 1 key
	rule := func(route string) string {
		return `{"route": "` + route + `", "limits": [{"algorithm": "token_bucket", "capacity": 1, "refill_per_second": 1}]}`
	}
	expect := func(want int, method, path, body string) *httptest.ResponseRecorder {
		t.Helper()
		rec := s.do(method, path, testAdminToken, body)
		if rec.Code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, rec.Code, rec.Body, want)
		}
		return rec
	}
	capReached := func(rec *httptest.ResponseRecorder, says string) {
		t.Helper()
		if !strings.Contains(rec.Body.String(), `"tenant_cap_reached"`) || !strings.Contains(rec.Body.String(), says) {
			t.Errorf("answer %s, want tenant_cap_reached saying %q", rec.Body, says)
		}
	}

	expect(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/b", rule("/b"))
	capReached(expect(http.StatusConflict, "PUT", "/v1/tenants/acme/rules/c", rule("/c")),
		`Tenant \"acme\" already has 2 rules, the most this server allows per tenant (2)`)
	expect(http.StatusOK, "PUT", "/v1/tenants/acme/rules/b", rule("/b2")) // replacing is not creating
	expect(http.StatusNoContent, "DELETE", "/v1/tenants/acme/rules/b", "")
	expect(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/c", rule("/c"))

	expect(http.StatusCreated, "POST", "/v1/tenants/acme/keys", `{"role": "admin"}`)
	capReached(expect(http.StatusConflict, "POST", "/v1/tenants/acme/keys", `{"role": "check"}`),
		`2 active API keys, the most this server allows per tenant (2)`)
	keys, err := s.catalog.Keys(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	expect(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+keys[0].ID, "")
	expect(http.StatusCreated, "POST", "/v1/tenants/acme/keys", `{"role": "check"}`) // revoked keys do not count
}

func TestReadyzWhileDraining(t *testing.T) {
	s := newSpyAPI(t, Options{})
	if status, _ := s.readyz(t, true); status != http.StatusOK {
		t.Fatalf("before draining: %d", status)
	}
	s.api.Drain()
	status, body := s.readyz(t, false) // the cached 200 must not hide it
	if e, _ := body["error"].(map[string]any); status != http.StatusServiceUnavailable || e["code"] != "draining" {
		t.Errorf("while draining: %d %v, want 503 draining", status, body)
	}
	if rec := s.do("POST", "/v1/check", s.key, `{"route": "/api/payments", "subject": "d"}`); rec.Code != http.StatusOK {
		t.Errorf("a check while draining: %d %s", rec.Code, rec.Body)
	}
}
