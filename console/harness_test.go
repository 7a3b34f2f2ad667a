package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/console"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/sqlite"
	"github.com/sluicelabs/sluice/usage"
)

const adminToken = "console-test-admin-token-0123456789"

// stack is sluice serve's HTTP side as the console sees it: the API and the
// console on one mux over a real SQLite catalog and a memory store.
type stack struct {
	t   *testing.T
	srv *httptest.Server
	api *httpapi.API
	// flushUsage writes the usage counted so far to the catalog, as an
	// instance does every --usage-flush.
	flushUsage func()
	catalog    *sqlite.Catalog
}

func newStack(t *testing.T) *stack { return newStackWith(t, false, nil) }

// newStackWith builds a stack served over TLS or not, whose console options
// change may adjust.
func newStackWith(t *testing.T, overTLS bool, change func(*console.Options)) *stack {
	return newStackFull(t, overTLS, "", change)
}

// newStackFull is newStackWith whose API applies defaultMode to rules
// stored without a failure mode ("" for the API's own default, closed).
func newStackFull(t *testing.T, overTLS bool, defaultMode sluice.FailureMode, change func(*console.Options)) *stack {
	t.Helper()
	ctx := context.Background()
	catalog, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { catalog.Close() })
	if err := catalog.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := catalog.SetAdminTokenHash(ctx, sluice.HashAPIKey(adminToken)); err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	m := metrics.New(prometheus.NewRegistry())
	rollups := usage.NewRecorder(usage.Options{})
	engine := check.New(store, check.Options{Metrics: m, Usage: rollups})
	t.Cleanup(func() { engine.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	api, err := httpapi.New(ctx, httpapi.Options{Catalog: catalog, Engine: engine, Metrics: m, Logger: logger,
		DefaultFailureMode: defaultMode})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = api.Run(runCtx) }()
	opts := console.Options{API: api, Engine: engine, StoreName: "memory", Logger: logger}
	if change != nil {
		change(&opts)
	}
	c, err := console.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Register(mux)
	c.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	if overTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	flush := func() {
		rollups.Roll(time.Now())
		if err := rollups.Flush(ctx, catalog); err != nil {
			t.Fatal(err)
		}
	}
	return &stack{t: t, srv: srv, api: api, flushUsage: flush, catalog: catalog}
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so tests see each answer.
type browser struct {
	s    *stack
	c    *http.Client
	csrf string
}

func (s *stack) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{s: s, c: &http.Client{Jar: jar, Transport: s.srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status int
	header http.Header
	body   string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) do(req *http.Request) page {
	b.s.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	p := page{status: resp.StatusCode, header: resp.Header, body: string(raw)}
	if m := csrfField.FindStringSubmatch(p.body); m != nil {
		b.csrf = m[1]
	}
	return p
}

func (b *browser) get(path string) page {
	b.s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.s.srv.URL+path, nil)
	return b.do(req)
}

// post submits a form as a page of the console does, with the CSRF token
// of the last page seen (unless form sets its own).
func (b *browser) post(path string, form url.Values) page {
	b.s.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	req, _ := http.NewRequest(http.MethodPost, b.s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.s.srv.URL)
	return b.do(req)
}

func (b *browser) signIn(secret string) {
	b.s.t.Helper()
	p := b.post("/console/signin", url.Values{"secret": {secret}})
	if p.status != http.StatusSeeOther {
		b.s.t.Fatalf("sign-in: status %d, want 303; %s", p.status, p.body)
	}
	b.get("/console/") // for the CSRF token
}

// must fails the test unless p has status and contains every want.
func must(t *testing.T, what string, p page, status int, want ...string) {
	t.Helper()
	if p.status != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, p.status, status, p.body)
	}
	for _, w := range want {
		if !strings.Contains(p.body, w) {
			t.Fatalf("%s: page lacks %q\n%s", what, w, p.body)
		}
	}
}

// apiCall calls the JSON API directly, as a client would.
func (s *stack) apiCall(method, path, secret, body string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
