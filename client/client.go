// Package client is a small Go client for a Sluice service: Client calls the
// check API (POST /v1/check), asking a remote `sluice serve` whether a
// request may go through; Admin calls the admin API (/v1/tenants/...).
//
//	c, err := client.New("http://sluice:8080", os.Getenv("SLUICE_API_KEY"))
//	res, err := c.Check(ctx, "/api/orders/17", "user-42", 1)
//	if err == nil && !res.Allowed { /* 429, wait res.RetryAfter */ }
//
// A denial is a Result with Allowed false, not an error. Errors are transport
// failures or an *Error carrying the service's status, code and message.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
)

// DefaultTimeout bounds a whole check call unless WithHTTPClient or
// WithTimeout says otherwise.
const DefaultTimeout = 2 * time.Second

// Client calls one Sluice service with one tenant API key. It is safe for
// concurrent use.
type Client struct {
	checkURL string
	apiKey   string
	http     *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithTimeout bounds each check call, including reading the answer.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		hc := *c.http
		hc.Timeout = d
		c.http = &hc
	}
}

// New returns a Client for the service at baseURL ("http://host:8080") that
// authenticates with the tenant API key apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sluice client: base URL %q must be an absolute http:// or https:// URL", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("sluice client: an API key is required")
	}
	c := &Client{
		checkURL: strings.TrimRight(u.String(), "/") + "/v1/check",
		apiKey:   apiKey,
		http:     &http.Client{Timeout: DefaultTimeout},
	}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// Result is the service's decision.
type Result struct {
	Allowed bool
	// Rule is the name of the rule that matched the route; "" when none did
	// (the request is then allowed and nothing is counted).
	Rule string
	// Limit, Remaining, ResetAfter and RetryAfter are those of the most
	// restrictive limit; RetryAfter is exact and zero when allowed.
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	// Degraded is set when the service's store could not answer and the
	// rule's failure policy decided.
	Degraded bool
	// Shadow is set when the rule only observes: it never denies.
	Shadow bool
	Limits []LimitResult
	// Hold is what an allowed check took that can be given back (a
	// concurrency lease, a reserved estimate): settle, release or extend it
	// with Settle, Release or Extend. Nil when it took nothing.
	Hold *sluice.Hold
	// Header holds the rate-limit headers the service sent (RateLimit-Policy,
	// RateLimit, X-RateLimit-*, Retry-After), for a caller to pass on.
	Header http.Header
}

// LimitResult is one limit's part of a Result.
type LimitResult struct {
	Name       string
	Algorithm  sluice.Algorithm
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
}

// Error is an error answer of the service (any 4xx or 5xx).
type Error struct {
	// StatusCode is the HTTP status: 400 bad input, 401 bad API key, 403
	// wrong role or suspended tenant, 503 store unavailable, ...
	StatusCode int
	// Code is the service's snake_case error code, like "invalid_api_key".
	Code string
	// Message is the service's explanation, written for a person.
	Message string
	// RetryAfter is the service's Retry-After, if it sent one (503).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("sluice service answered %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Unwrap lets errors.Is match the domain errors: sluice.ErrInvalid for a 400,
// sluice.ErrNotFound for a 404, sluice.ErrConflict for a 409,
// sluice.ErrStoreUnavailable for a 503.
func (e *Error) Unwrap() error {
	switch e.StatusCode {
	case http.StatusBadRequest:
		return sluice.ErrInvalid
	case http.StatusNotFound:
		return sluice.ErrNotFound
	case http.StatusConflict:
		return sluice.ErrConflict
	case http.StatusServiceUnavailable:
		return sluice.ErrStoreUnavailable
	}
	return nil
}

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20

// Check asks whether a request on route by subject, of the given cost, may go
// through, and consumes cost from the matched rule's limits if so. A cost of
// 0 peeks without consuming. A denial is a Result with Allowed false; an
// error is either a transport failure or an *Error.
func (c *Client) Check(ctx context.Context, route, subject string, cost int64) (Result, error) {
	return c.check(ctx, checkRequest{Route: route, Subject: subject, Cost: cost})
}

func (c *Client) check(ctx context.Context, creq checkRequest) (Result, error) {
	body, err := json.Marshal(creq)
	if err != nil {
		return Result{}, fmt.Errorf("sluice client: encode check: %w", err)
	}
	resp, raw, err := c.send(ctx, http.MethodPost, c.checkURL, body, "check")
	if err != nil {
		return Result{}, err
	}

	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return Result{}, errorFrom(resp, raw)
	}
	var d decisionBody
	if err := json.Unmarshal(raw, &d); err != nil {
		return Result{}, fmt.Errorf("sluice client: the service answered %d with a body that is not a decision: %w", resp.StatusCode, err)
	}
	res := Result{
		Allowed:    d.Allowed,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		ResetAfter: time.Duration(d.ResetAfterMs) * time.Millisecond,
		RetryAfter: time.Duration(d.RetryAfterMs) * time.Millisecond,
		Degraded:   d.Degraded,
		Shadow:     d.Shadow,
		Header:     rateLimitHeaders(resp.Header),
	}
	if d.Rule != nil {
		res.Rule = *d.Rule
	}
	if d.Hold != nil {
		res.Hold = &sluice.Hold{ID: d.Hold.ID, ExpiresIn: time.Duration(d.Hold.ExpiresInMs) * time.Millisecond}
	}
	for _, l := range d.Limits {
		res.Limits = append(res.Limits, LimitResult{
			Name:       l.Name,
			Algorithm:  sluice.Algorithm(l.Algorithm),
			Limit:      l.Limit,
			Remaining:  l.Remaining,
			ResetAfter: time.Duration(l.ResetAfterMs) * time.Millisecond,
			RetryAfter: time.Duration(l.RetryAfterMs) * time.Millisecond,
		})
	}
	return res, nil
}

// send makes one call of the service with the API key and returns the
// answer, its body read (at most maxResponseBytes) and closed.
func (c *Client) send(ctx context.Context, method, url string, body []byte, what string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("sluice client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-API-Key", c.apiKey)
	resp, err := c.http.Do(req)
	if err != nil {
		// The URL holds no secret (the key travels in a header), so the
		// transport error is safe to return as it is.
		return nil, nil, fmt.Errorf("sluice client: %s: %w", what, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("sluice client: read answer: %w", err)
	}
	return resp, raw, nil
}

func errorFrom(resp *http.Response, raw []byte) *Error {
	e := &Error{StatusCode: resp.StatusCode}
	var body errorBody
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
	} else {
		e.Code = "http_" + strconv.Itoa(resp.StatusCode)
		e.Message = http.StatusText(resp.StatusCode)
	}
	if s, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// rateLimitHeaders copies the rate-limit fields of h.
func rateLimitHeaders(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		for _, v := range h.Values(name) {
			out.Add(name, v)
		}
	}
	return out
}

type checkRequest struct {
	Route   string `json:"route"`
	Subject string `json:"subject,omitempty"`
	Cost    int64  `json:"cost"`
	Reserve bool   `json:"reserve,omitempty"`
}

type decisionBody struct {
	Allowed      bool        `json:"allowed"`
	Rule         *string     `json:"rule"`
	Limit        int64       `json:"limit"`
	Remaining    int64       `json:"remaining"`
	ResetAfterMs int64       `json:"reset_after_ms"`
	RetryAfterMs int64       `json:"retry_after_ms"`
	Degraded     bool        `json:"degraded"`
	Shadow       bool        `json:"shadow"`
	Limits       []limitBody `json:"limits"`
	Hold         *holdBody   `json:"hold"`
}

type limitBody struct {
	Name         string `json:"name"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
