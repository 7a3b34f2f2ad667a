// Package client is a small Go client for a Sluice service: Client calls the
// check API (POST /v1/check), asking a remote `sluice serve` whether a
// request may go through; Admin calls the admin API (/v1/tenants/...).
//
//	c, err := client.New("http://sluice:8080", os.Getenv("SLUICE_API_KEY"))
//	res, err := c.Check(ctx, "/api/orders/17", "user-42", 1)
//	if err == nil && !res.Allowed { /* 429, wait res.RetryAfter */ }
//
// For a hot key of a rule that leases (every limit "lease": "auto"),
// NewLeasedLimiter decides requests in this process from units leased from
// the service, with no call per request while units are in hand (see
// leases.go).
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
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/ratelimitheader"
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

// Result is the service's decision, every figure of its answer kept.
type Result struct {
	// Decision holds the figures (and Hold, what an allowed check took that
	// can be given back: settle, release or extend it with Settle, Release
	// or Extend): Allowed, those of the most restrictive
	// limit (RetryAfter exact, zero when allowed), Degraded when the
	// service's store could not answer and the rule's failure mode decided,
	// and each limit's own (a limit's Allowed is whether it has nothing to
	// wait for; its Window is not sent and stays zero). For a shadow rule
	// Allowed is true and the limits still say what they would have decided.
	sluice.Decision
	// Rule is the name of the rule that matched the route; "" when none did
	// (the request is then allowed and nothing is counted).
	Rule string
	// Shadow is set when the rule only observes: it never denies.
	Shadow bool
	// Header holds the rate-limit headers the service sent (RateLimit-Policy,
	// RateLimit, X-RateLimit-*, Retry-After), for a caller to pass on.
	Header http.Header
}

// Wire is r as the service's answer body: what `sluice check -o json`
// prints.
func (r Result) Wire() checkapi.Decision {
	return checkapi.NewDecision(r.Rule, r.Decision, r.Shadow)
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
	return c.check(ctx, checkapi.Request{Route: route, Subject: subject, Cost: &cost})
}

func (c *Client) check(ctx context.Context, creq checkapi.Request) (Result, error) {
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
	var d checkapi.Decision
	if err := json.Unmarshal(raw, &d); err != nil {
		return Result{}, fmt.Errorf("sluice client: the service answered %d with a body that is not a decision: %w", resp.StatusCode, err)
	}
	return Result{Decision: d.StoreDecision(), Rule: d.RuleName(), Shadow: d.Shadow, Header: ratelimitheader.Copy(resp.Header)}, nil
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
	var body checkapi.ErrorBody
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
