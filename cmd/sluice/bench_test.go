package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestBenchConfigValidation(t *testing.T) {
	good := benchConfig{URL: "http://127.0.0.1:8080", APIKey: "k", Route: "/x", Reference: "/healthz"}
	for name, c := range map[string]struct {
		mutate func(*benchConfig)
		says   string
	}{
		"no_key":        {func(c *benchConfig) { c.APIKey = "" }, "--api-key is required"},
		"no_route":      {func(c *benchConfig) { c.Route = "" }, "--route is required"},
		"bad_url":       {func(c *benchConfig) { c.URL = "127.0.0.1:8080" }, "--url"},
		"relative_ref":  {func(c *benchConfig) { c.Reference = "healthz" }, "--reference"},
		"negative_cost": {func(c *benchConfig) { c.Cost = -1 }, "--cost"},
	} {
		cfg := good
		c.mutate(&cfg)
		err := cfg.validate()
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want a message about %s", name, err, c.says)
		}
	}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
}

// TestBenchReportsChecksAndReference runs sluice bench against a server that
// allows even subjects' checks and denies the rest, with /healthz as the
// reference.
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
			if strings.Contains(buf.String(), `"subject":"hot"`) {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
		case "/healthz":
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	cfg := benchConfig{URL: srv.URL, APIKey: "sk_bench", Route: "/x", Cost: 1, Concurrency: 2, Duration: 100 * time.Millisecond, Subjects: 10, Hot: 0.5, Reference: "/healthz"}
	if err := runBench(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"POST /v1/check /x", "GET /healthz (reference)", "check / reference:"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	cfg.APIKey = "wrong"
	if err := runBench(context.Background(), cfg, &out); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("a wrong key must stop the run with the reason, got %v", err)
	}
}
