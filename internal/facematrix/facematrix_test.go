package facematrix

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/middleware"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// A rule of the matrix: a failure mode, shadow or not, and one request an
// hour per subject.
type rule struct {
	mode   sluice.FailureMode
	shadow bool
}

func (r rule) name() string { return fmt.Sprintf("m-%s-%t", r.mode, r.shadow) }

var rules = func() []rule {
	var out []rule
	for _, mode := range []sluice.FailureMode{sluice.FailClosed, sluice.FailOpen, sluice.FailLocal} {
		for _, shadow := range []bool{false, true} {
			out = append(out, rule{mode, shadow})
		}
	}
	return out
}()

// A face answers one request of subject under r: true when the client may
// go on.
type face struct {
	name  string
	allow func(t *testing.T, r rule, subject string) bool
}

// TestEveryFaceGivesTheSameAnswer checks two requests of one subject (the
// limit admits one) under every rule, first with the store answering, then
// with it stopped, through every face, and wants the same allow or deny from
// each: a shadow rule never denies, not even when a local failure mode's
// fallback does; a closed one denies (or fails) while the store is down.
func TestEveryFaceGivesTheSameAnswer(t *testing.T) {
	srv := testenv.Redis(t)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	engine := check.New(store, check.Options{})
	t.Cleanup(func() { engine.Close() })

	faces := []face{httpFace(t, engine), envoyFace(t, engine), middlewareFace(t, store, engine), gatewayFace(t, srv.URL(), store)}

	for _, state := range []struct {
		name string
		// want is the answers to the two requests, by rule.
		want func(r rule) [2]bool
		set  func()
	}{
		{"store_answers", func(r rule) [2]bool { return [2]bool{true, r.shadow} }, func() {}},
		{"store_down", func(r rule) [2]bool {
			switch {
			case r.mode == sluice.FailClosed:
				return [2]bool{false, false}
			case r.mode == sluice.FailOpen || r.shadow:
				return [2]bool{true, true}
			}
			return [2]bool{true, false} // the local fallback's own limit
		}, srv.Stop},
	} {
		state.set()
		for _, r := range rules {
			want := state.want(r)
			for _, f := range faces {
				subject := fmt.Sprintf("%s-%s-%s", state.name, f.name, r.name())
				var got [2]bool
				for i := range got {
					got[i] = f.allow(t, r, subject)
				}
				if got != want {
					t.Errorf("%s, rule %s, through %s: allowed %v, want %v", state.name, r.name(), f.name, got, want)
				}
			}
		}
	}
}

func httpFace(t *testing.T, engine *check.Engine) face {
	var catalogRules []sluice.Rule
	for _, r := range rules {
		catalogRules = append(catalogRules, sluice.Rule{Tenant: "acme", Name: r.name(), Route: "/" + r.name(),
			Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour).Named("hour")}, FailureMode: r.mode, Shadow: r.shadow})
	}
	catalog, key := catalogtest.SQLiteTenant(t, catalogRules...)
	api, err := httpapi.New(t.Context(), httpapi.Options{Catalog: catalog, Engine: engine, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler()
	return face{"http", func(t *testing.T, r rule, subject string) bool {
		req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(fmt.Sprintf(`{"route": "/%s", "subject": %q}`, r.name(), subject)))
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			return true
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			return false
		}
		t.Fatalf("http: %d %s", rec.Code, rec.Body)
		return false
	}}
}

func envoyFace(t *testing.T, engine *check.Engine) face {
	var yaml strings.Builder
	yaml.WriteString("domain: matrix\ndescriptors:\n")
	for _, r := range rules {
		fmt.Fprintf(&yaml, "  - key: rule\n    value: %s\n    descriptors:\n      - key: user\n        shadow_mode: %t\n"+
			"        rate_limit: {unit: hour, requests_per_unit: 1, failure_mode: %s}\n", r.name(), r.shadow, r.mode)
	}
	d, err := envoyrls.ParseDomain("matrix.yaml", []byte(yaml.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml.String())
	}
	cfg, err := envoyrls.NewConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	s := envoyrls.NewServer(envoyrls.Options{Engine: engine, Logger: slog.New(slog.DiscardHandler)})
	s.SetConfig(cfg)
	return face{"envoy", func(t *testing.T, r rule, subject string) bool {
		resp, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "matrix",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
				{Key: "rule", Value: r.name()}, {Key: "user", Value: subject}}}}})
		if err != nil {
			t.Fatalf("envoy: %v", err)
		}
		return resp.OverallCode == rlspb.RateLimitResponse_OK
	}}
}

func middlewareFace(t *testing.T, store sluice.Store, engine *check.Engine) face {
	handlers := map[rule]http.Handler{}
	for _, r := range rules {
		l, err := middleware.NewLimiter(middleware.Options{Store: store, Engine: engine, Name: r.name(), Tenant: "middleware",
			Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour).Named("hour")}, FailureMode: r.mode, Shadow: r.shadow,
			Key: middleware.Header("X-User")})
		if err != nil {
			t.Fatal(err)
		}
		handlers[r] = l.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") }))
	}
	return face{"middleware", func(t *testing.T, r rule, subject string) bool {
		return served(t, "middleware", handlers[r], "/", subject)
	}}
}

// gatewayFace is a gateway whose file names the Redis at redisURL, handed
// that Redis's store as sluice gateway hands it the one it opens.
func gatewayFace(t *testing.T, redisURL string, store sluice.Store) face {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") }))
	t.Cleanup(upstream.Close)
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "redis: %s\nroutes:\n", redisURL)
	for _, r := range rules {
		fmt.Fprintf(&yaml, "  - {name: %s, path_prefix: /%s, upstream: %q, failure_mode: %s, shadow: %t, key: {header: X-User},\n"+
			"     limits: [{name: hour, algorithm: fixed_window, limit: 1, window: 1h}]}\n", r.name(), r.name(), upstream.URL, r.mode, r.shadow)
	}
	cfg, err := gateway.ParseConfig([]byte(yaml.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml.String())
	}
	gw, err := gateway.New(cfg, gateway.Options{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return face{"gateway", func(t *testing.T, r rule, subject string) bool {
		return served(t, "gateway", gw, "/"+r.name(), subject)
	}}
}

// served sends one request of subject to h, and reports whether it was let
// through (200) rather than refused (429, or 503 when failing closed).
func served(t *testing.T, face string, h http.Handler, path, subject string) bool {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("X-User", subject)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if !slices.Contains([]int{http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable}, rec.Code) {
		t.Fatalf("%s: %d %s", face, rec.Code, rec.Body)
	}
	return rec.Code == http.StatusOK
}
