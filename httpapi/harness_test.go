package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/postgres"
	"github.com/sluicelabs/sluice/usage"
)

const testAdminToken = "test-admin-token-0123456789"

// harness is one API instance on a real listener over a real catalog and a
// real store.
type harness struct {
	t       *testing.T
	api     *API
	srv     *httptest.Server
	catalog sluice.Catalog
	store   sluice.Store
	reg     *prometheus.Registry
}

type harnessOptions struct {
	dsn         string       // catalog database; a fresh one when empty
	store       sluice.Store // default: a fresh memory store
	guard       guard.Options
	defaultMode sluice.FailureMode
	logs        io.Writer    // the API's JSON log; default: discarded
	writeLimit  sluice.Limit // tenants' admin writes; default: DefaultAdminWriteLimit
	// catalog, if set, is used as it is (holding testAdminToken's hash)
	// instead of a fresh PostgreSQL one.
	catalog    sluice.Catalog
	writeProbe time.Duration   // Options.WriteProbeInterval
	usage      *usage.Recorder // the engine's rollups; default none
}

func newPostgresCatalog(t *testing.T, dsn string) *postgres.Catalog {
	t.Helper()
	ctx := context.Background()
	c, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	ctx := context.Background()
	catalog := o.catalog
	if catalog == nil {
		if o.dsn == "" {
			o.dsn = testenv.Postgres(t)
		}
		pc := newPostgresCatalog(t, o.dsn)
		if err := pc.SetAdminTokenHash(ctx, sluice.HashAPIKey(testAdminToken)); err != nil {
			t.Fatal(err)
		}
		catalog = pc
	}
	store := o.store
	if store == nil {
		ms := memory.New(memory.Options{})
		t.Cleanup(func() { ms.Close() })
		store = ms
	}
	logs := o.logs
	if logs == nil {
		logs = io.Discard
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	engine := check.New(store, check.Options{Guard: o.guard, Metrics: m, Usage: o.usage})
	t.Cleanup(func() { engine.Close() })
	api, err := New(ctx, Options{
		Catalog:            catalog,
		Engine:             engine,
		Metrics:            m,
		Logger:             slog.New(slog.NewJSONHandler(logs, nil)),
		DefaultFailureMode: o.defaultMode,
		AdminWriteLimit:    o.writeLimit,
		WriteProbeInterval: o.writeProbe,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = api.Run(runCtx) }()
	bindOpenAPI(t, api)
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return &harness{t: t, api: api, srv: srv, catalog: catalog, store: store, reg: reg}
}

// with returns h reporting to t, for use inside subtests.
func (h *harness) with(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

// response is an answer with its decoded JSON body.
type response struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// errorCode is the code of an error answer.
func (r response) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (h *harness) do(method, path, auth string, body any) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			h.t.Fatalf("%s %s: answer is not JSON: %q", method, path, raw)
		}
	}
	return out
}

// must does a call and fails the test unless it answers want.
func (h *harness) must(want int, method, path, auth string, body any) response {
	h.t.Helper()
	r := h.do(method, path, auth, body)
	if r.status != want {
		h.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, want, r.raw)
	}
	return r
}

func (h *harness) createTenant(name string) {
	h.t.Helper()
	h.must(http.StatusCreated, "POST", "/v1/tenants", testAdminToken, map[string]any{"name": name})
}

// createKey creates a key and returns its secret and ID.
func (h *harness) createKey(tenant, role string) (secret, id string) {
	h.t.Helper()
	r := h.must(http.StatusCreated, "POST", "/v1/tenants/"+tenant+"/keys", testAdminToken, map[string]any{"role": role})
	return r.body["secret"].(string), r.body["id"].(string)
}

// putRule creates (201) or replaces (200) a rule.
func (h *harness) putRule(tenant, name string, rule map[string]any) {
	h.t.Helper()
	r := h.do("PUT", "/v1/tenants/"+tenant+"/rules/"+name, testAdminToken, rule)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		h.t.Fatalf("PUT rule %s/%s: status %d; body %s", tenant, name, r.status, r.raw)
	}
}

func (h *harness) check(key string, body any) response {
	h.t.Helper()
	return h.do("POST", "/v1/check", key, body)
}

// counter reads a counter of the registry by name and labels.
func (h *harness) counter(name string, labels map[string]string) float64 {
	h.t.Helper()
	return h.metric(name, labels, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

// gauge reads a gauge of the registry by name and labels.
func (h *harness) gauge(name string, labels map[string]string) float64 {
	h.t.Helper()
	return h.metric(name, labels, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

// metric reads the value of the first metric named name with labels.
func (h *harness) metric(name string, labels map[string]string, value func(*dto.Metric) float64) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metric
				}
			}
			return value(m)
		}
	}
	return 0
}

func tokenBucketRule(route string, capacity int64, refill float64) map[string]any {
	return map[string]any{
		"route":  route,
		"limits": []any{map[string]any{"name": "burst", "algorithm": "token_bucket", "capacity": capacity, "refill_per_second": refill}},
	}
}
