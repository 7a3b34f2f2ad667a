package loadgen_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/loadgen"
)

// benchConfig is DefaultConfig with the changes of each mod applied.
func benchConfig(mods ...func(*loadgen.Config)) loadgen.Config {
	c := loadgen.DefaultConfig()
	for _, m := range mods {
		m(&c)
	}
	return c
}

func httpTarget(c *loadgen.Config) { c.APIKey, c.Route = "k", "/x" }

func envoyTarget(c *loadgen.Config) { c.Target, c.Domain = "envoy", "api" }

func envoyJSONTarget(c *loadgen.Config) { c.Target, c.Domain = "envoy-json", "api" }

func TestConfigValidate(t *testing.T) {
	overload := func(c *loadgen.Config) { c.Overload, c.Rate = true, 10 }
	for name, c := range map[string]struct {
		mods []func(*loadgen.Config)
		says string
	}{
		"no_key":             {[]func(*loadgen.Config){func(c *loadgen.Config) { c.Route = "/x" }}, "--api-key is required"},
		"no_route":           {[]func(*loadgen.Config){func(c *loadgen.Config) { c.APIKey = "k" }}, "--route is required"},
		"bad_url":            {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.URL = "127.0.0.1:8080" }}, "--url"},
		"relative_ref":       {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Reference = "healthz" }}, "--reference"},
		"negative_cost":      {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Cost = -1 }}, "--cost"},
		"unknown_target":     {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Target = "ftp" }}, "--target"},
		"negative_rate":      {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Rate = -5 }}, "--rate"},
		"no_concurrency":     {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Concurrency = 0 }}, "--concurrency"},
		"zero_duration":      {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Duration = 0 }}, "--duration"},
		"no_subjects":        {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Subjects = 0 }}, "--subjects"},
		"hot_above_one":      {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Hot = 1.5 }}, "--hot"},
		"bad_metrics_url":    {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.MetricsURL = "localhost/metrics" }}, "--metrics-url"},
		"envoy_holds":        {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Holds = true }}, "--holds"},
		"no_domain":          {[]func(*loadgen.Config){func(c *loadgen.Config) { c.Target = "envoy" }}, "--domain is required"},
		"bad_grpc_addr":      {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.GRPCAddr = "8081" }}, "--grpc-addr"},
		"no_grpc_conns":      {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.GRPCConns = 0 }}, "--grpc-conns"},
		"huge_cost":          {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Cost = 5_000_000_000 }}, "hits_addend"},
		"http_reference":     {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Reference = "/ping" }}, "gRPC health check"},
		"entry_no_value":     {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Descriptors = []string{"api,user"} }}, `entry "api" has no value`},
		"entry_empty_value":  {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Descriptors = []string{"api=,user"} }}, `entry "api" has an empty value`},
		"entry_no_key":       {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Descriptors = []string{"=v,user"} }}, "no key"},
		"subject_key_unused": {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.Descriptors = []string{"api=orders"} }}, `--subject-key "user"`},
		"no_descriptor":      {[]func(*loadgen.Config){envoyTarget, func(c *loadgen.Config) { c.SubjectKey = "" }}, "--descriptor"},
		"json_no_domain":     {[]func(*loadgen.Config){func(c *loadgen.Config) { c.Target = "envoy-json" }}, "--domain is required with --target envoy-json"},
		"json_reserve":       {[]func(*loadgen.Config){envoyJSONTarget, func(c *loadgen.Config) { c.Reserve = true }}, "--reserve"},
		"json_relative_ref":  {[]func(*loadgen.Config){envoyJSONTarget, func(c *loadgen.Config) { c.Reference = "healthcheck" }}, "--reference"},
		"json_no_descriptor": {[]func(*loadgen.Config){envoyJSONTarget, func(c *loadgen.Config) { c.SubjectKey = "" }}, "--descriptor"},
		"overload_no_rate":   {[]func(*loadgen.Config){httpTarget, func(c *loadgen.Config) { c.Overload = true }}, "set --rate"},
		"overload_factor":    {[]func(*loadgen.Config){httpTarget, overload, func(c *loadgen.Config) { c.StepFactor = 1 }}, "--step-factor"},
		"overload_max_rate":  {[]func(*loadgen.Config){httpTarget, overload, func(c *loadgen.Config) { c.MaxRate = 5 }}, "--max-rate"},
		"overload_step":      {[]func(*loadgen.Config){httpTarget, overload, func(c *loadgen.Config) { c.StepDuration = 0 }}, "--step-duration"},
		"overload_p99":       {[]func(*loadgen.Config){httpTarget, overload, func(c *loadgen.Config) { c.P99Limit = 0 }}, "--p99-limit"},
	} {
		t.Run(name, func(t *testing.T) {
			err := benchConfig(c.mods...).Validate()
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("got %v, want a message about %s", err, c.says)
			}
		})
	}
	for name, mods := range map[string][]func(*loadgen.Config){
		"http":  {httpTarget},
		"envoy": {envoyTarget},
		"envoy_descriptors": {envoyTarget, func(c *loadgen.Config) {
			c.Descriptors, c.Reference = []string{"api=orders,user", "tier=free"}, ""
		}},
		"envoy_json":           {envoyJSONTarget, func(c *loadgen.Config) { c.Reference = "/healthcheck" }},
		"envoy_no_subject_key": {envoyTarget, func(c *loadgen.Config) { c.Descriptors, c.SubjectKey = []string{"api=orders"}, "" }},
		"overload_no_cpu": {httpTarget, func(c *loadgen.Config) {
			c.Overload, c.Rate, c.MetricsURL = true, 100, "none"
		}},
	} {
		t.Run("valid_"+name, func(t *testing.T) {
			if err := benchConfig(mods...).Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestConfigParsedDescriptors(t *testing.T) {
	c := benchConfig(envoyTarget, func(c *loadgen.Config) { c.Descriptors = []string{" api = orders , user", "tier=free"} })
	ds, err := c.ParsedDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	want := []loadgen.Descriptor{{{Key: "api", Value: "orders"}, {Key: "user"}}, {{Key: "tier", Value: "free"}}}
	if len(ds) != len(want) || len(ds[0]) != 2 || ds[0][0] != want[0][0] || ds[0][1] != want[0][1] || ds[1][0] != want[1][0] {
		t.Fatalf("got %+v, want %+v", ds, want)
	}
	if ds, err := benchConfig(envoyTarget).ParsedDescriptors(); err != nil || len(ds) != 1 || ds[0][0] != (loadgen.Entry{Key: "user"}) {
		t.Fatalf("no --descriptor: want one of the subject key alone, got %+v, %v", ds, err)
	}
}

// TestBenchReportsChecksAndReference benches a server that allows even
// subjects' checks and denies the rest, with /healthz as the reference.
func TestBenchReportsChecksAndReference(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/check":
			if r.Header.Get("X-API-Key") != "sk_bench" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			var buf bytes.Buffer
			buf.ReadFrom(r.Body)
			switch {
			case strings.Contains(buf.String(), `"subject":"hot"`):
				w.WriteHeader(http.StatusTooManyRequests)
			case strings.Contains(buf.String(), `"subject":"subject-1"`):
				http.Error(w, `{"error":{"code":"overloaded","message":"busy"}}`, http.StatusServiceUnavailable)
			}
		case "/healthz":
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	var out, progress bytes.Buffer
	cfg := benchConfig(func(c *loadgen.Config) {
		c.URL, c.APIKey, c.Route, c.Concurrency, c.Duration, c.Subjects, c.Hot = srv.URL, "sk_bench", "/x", 2, 100*time.Millisecond, 10, 0.5
	})
	if err := loadgen.Bench(context.Background(), cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POST /v1/check /x", "GET /healthz (reference)", "check / reference:", "shed as overloaded"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The fake serves no /metrics: CPU is left out with the reason, and the
	// run goes on; asked for explicitly, the page must be there.
	if !strings.Contains(progress.String(), "CPU per check not measured") || !strings.Contains(progress.String(), "HTTP 404") {
		t.Fatalf("no note on the missing metrics: %q", progress.String())
	}
	explicit := cfg
	explicit.MetricsURL, explicit.MetricsURLSet = srv.URL+"/metrics", true
	if err := loadgen.Bench(context.Background(), explicit, &out, &progress); err == nil || !strings.Contains(err.Error(), "--metrics-url") {
		t.Fatalf("an explicit --metrics-url without the metric must stop the run, got %v", err)
	}
	cfg.APIKey = "wrong"
	if err := loadgen.Bench(context.Background(), cfg, &out, &progress); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("a wrong key must stop the run with the reason, got %v", err)
	}
}
