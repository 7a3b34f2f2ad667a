package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// documentedService answers POST /v1/check with the JSON of DESIGN.md's "HTTP
// check API", with a status and body chosen per test.
func documentedService(t *testing.T, status int, body string, header map[string]string) (*httptest.Server, *http.Request, *map[string]any) {
	t.Helper()
	var got http.Request
	var sent map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = *r.Clone(context.Background())
		if err := json.NewDecoder(r.Body).Decode(&sent); err != nil {
			t.Errorf("request body: %v", err)
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &got, &sent
}

func TestCheckDecodesDecisions(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		header map[string]string
		want   client.Result
	}{
		{
			name:   "allowed_with_every_field",
			status: 200,
			body: `{"allowed":true,"rule":"orders","limit":10,"remaining":7,"reset_after_ms":1500,"retry_after_ms":0,"degraded":false,"shadow":false,
				"limits":[{"name":"burst","algorithm":"token_bucket","limit":10,"remaining":7,"reset_after_ms":1500,"retry_after_ms":0}]}`,
			header: map[string]string{"RateLimit-Policy": `"orders.burst";q=10;w=1`, "RateLimit": `"orders.burst";r=7;t=2`, "X-RateLimit-Remaining": "7"},
			want: client.Result{Rule: "orders", Decision: sluice.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond,
				Limits: []sluice.LimitDecision{{Name: "burst", Algorithm: sluice.AlgorithmTokenBucket, Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond}}}},
		},
		{
			name:   "denied_by_one_limit_of_two",
			status: 429,
			body: `{"allowed":false,"rule":"orders","limit":5,"remaining":0,"reset_after_ms":60000,"retry_after_ms":12000,"degraded":false,"shadow":false,
				"limits":[{"name":"burst","algorithm":"token_bucket","limit":10,"remaining":7,"reset_after_ms":1500,"retry_after_ms":0},
				{"name":"minute","algorithm":"fixed_window","limit":5,"remaining":0,"reset_after_ms":60000,"retry_after_ms":12000}]}`,
			want: client.Result{Rule: "orders", Decision: sluice.Decision{Limit: 5, ResetAfter: time.Minute, RetryAfter: 12 * time.Second,
				Limits: []sluice.LimitDecision{
					{Name: "burst", Algorithm: sluice.AlgorithmTokenBucket, Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond},
					{Name: "minute", Algorithm: sluice.AlgorithmFixedWindow, Limit: 5, ResetAfter: time.Minute, RetryAfter: 12 * time.Second},
				}, Binding: 1}},
		},
		{
			name:   "a_hold_is_kept",
			status: 200,
			body: `{"allowed":true,"rule":"jobs","limit":10,"remaining":9,"reset_after_ms":30000,"retry_after_ms":0,"degraded":false,"shadow":false,
				"limits":[],"hold":{"id":"h_123","expires_in_ms":30000}}`,
			want: client.Result{Rule: "jobs",
				Decision: sluice.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 30 * time.Second, Hold: &sluice.Hold{ID: "h_123", ExpiresIn: 30 * time.Second}}},
		},
		{
			name:   "denied_is_a_result_not_an_error",
			status: 429,
			body:   `{"allowed":false,"rule":"orders","limit":10,"remaining":0,"reset_after_ms":60000,"retry_after_ms":2345,"degraded":false,"shadow":false,"limits":[]}`,
			header: map[string]string{"Retry-After": "3"},
			want:   client.Result{Rule: "orders", Decision: sluice.Decision{Limit: 10, ResetAfter: time.Minute, RetryAfter: 2345 * time.Millisecond}},
		},
		{
			name:   "no_rule_is_an_empty_rule_name",
			status: 200,
			body:   `{"allowed":true,"rule":null,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":false,"shadow":false,"limits":[]}`,
			want:   client.Result{Decision: sluice.Decision{Allowed: true}},
		},
		{
			name:   "degraded_and_shadow_flags",
			status: 200,
			body:   `{"allowed":true,"rule":"r","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":true,"shadow":true,"limits":[]}`,
			want:   client.Result{Rule: "r", Shadow: true, Decision: sluice.Decision{Allowed: true, Degraded: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got, sent := documentedService(t, tt.status, tt.body, tt.header)
			c, err := client.New(srv.URL+"/", "sk_test_123")
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Check(context.Background(), "/api/orders/17", "user-42", 2)
			if err != nil {
				t.Fatal(err)
			}
			if got.Method != http.MethodPost || got.URL.Path != "/v1/check" || got.Header.Get("X-API-Key") != "sk_test_123" {
				t.Fatalf("sent %s %s with X-API-Key %q", got.Method, got.URL.Path, got.Header.Get("X-API-Key"))
			}
			if (*sent)["route"] != "/api/orders/17" || (*sent)["subject"] != "user-42" || (*sent)["cost"] != 2.0 {
				t.Fatalf("sent body %v", *sent)
			}
			for k, v := range tt.header {
				if res.Header.Get(k) != v {
					t.Errorf("Header %s = %q, want %q", k, res.Header.Get(k), v)
				}
			}
			res.Header = nil
			if !reflect.DeepEqual(res, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", res, tt.want)
			}
		})
	}
}

func TestCheckCostZeroIsSent(t *testing.T) {
	srv, _, sent := documentedService(t, 200, `{"allowed":true,"rule":null,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":false,"shadow":false,"limits":[]}`, nil)
	c, _ := client.New(srv.URL, "k")
	if _, err := c.Check(context.Background(), "/x", "", 0); err != nil {
		t.Fatal(err)
	}
	if cost, ok := (*sent)["cost"]; !ok || cost != 0.0 {
		t.Fatalf("cost 0 (peek) must be sent explicitly, since the service defaults to 1; body %v", *sent)
	}
}

func TestCheckErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		header     map[string]string
		wantCode   string
		wantIs     error
		wantRetry  time.Duration
		wantInText string
	}{
		{"unauthorized", 401, `{"error":{"code":"invalid_api_key","message":"The API key is unknown or has been revoked."}}`, nil, "invalid_api_key", nil, 0, "revoked"},
		{"bad_request_is_err_invalid", 400, `{"error":{"code":"invalid_cost","message":"Cost 11 can never fit."}}`, nil, "invalid_cost", sluice.ErrInvalid, 0, "never fit"},
		{"forbidden", 403, `{"error":{"code":"tenant_suspended","message":"The tenant of this API key is suspended."}}`, nil, "tenant_suspended", nil, 0, "suspended"},
		{"unavailable_is_store_unavailable", 503, `{"error":{"code":"store_unavailable","message":"retry shortly"}}`, map[string]string{"Retry-After": "1"}, "store_unavailable", sluice.ErrStoreUnavailable, time.Second, "retry"},
		{"non_json_error_body", 502, `<html>bad gateway</html>`, nil, "http_502", nil, 0, "Bad Gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _, _ := documentedService(t, tt.status, tt.body, tt.header)
			c, _ := client.New(srv.URL, "k")
			_, err := c.Check(context.Background(), "/x", "s", 1)
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *client.Error", err)
			}
			if e.StatusCode != tt.status || e.Code != tt.wantCode || e.RetryAfter != tt.wantRetry {
				t.Fatalf("got %+v, want status %d code %s retry %v", e, tt.status, tt.wantCode, tt.wantRetry)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			if !strings.Contains(e.Error(), tt.wantInText) {
				t.Fatalf("message %q lacks %q", e.Error(), tt.wantInText)
			}
		})
	}
}

func TestCheckTransportFailures(t *testing.T) {
	t.Run("unreachable_service", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c, _ := client.New(url, "k")
		if _, err := c.Check(context.Background(), "/x", "s", 1); err == nil {
			t.Fatal("want an error from a closed server")
		}
	})
	t.Run("cancelled_context", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		c, _ := client.New(srv.URL, "k")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := c.Check(ctx, "/x", "s", 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	for _, tt := range []struct{ name, url, key string }{
		{"relative_url", "localhost:8080", "k"},
		{"ftp_url", "ftp://host", "k"},
		{"empty_key", "http://host", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := client.New(tt.url, tt.key); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}
