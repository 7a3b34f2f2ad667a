package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
)

// HTTPCheck is the service's check API as a target: POST /v1/check with the
// tenant's API key, for a route and the subject the run picks.
type HTTPCheck struct {
	client *http.Client
	url    string
	apiKey string
	route  string
	cost   int64
}

// NewHTTPCheck returns a target for the check API at baseURL
// (http://host:port).
func NewHTTPCheck(baseURL, apiKey, route string, cost int64, concurrency int) *HTTPCheck {
	return &HTTPCheck{client: newHTTPClient(concurrency), url: baseURL + "/v1/check", apiKey: apiKey, route: route, cost: cost}
}

// Do sends one check: 200 is allowed, 429 denied, 503 with the error code
// "overloaded" shed, anything else an error carrying the service's message.
func (h *HTTPCheck) Do(ctx context.Context, subject string) (Outcome, error) {
	body, err := json.Marshal(checkapi.Request{Route: h.route, Subject: subject, Cost: &h.cost})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", h.apiKey)
	return doHTTP(h.client, req)
}

// DoReset is Do, also returning the answer's top-level reset_after_ms on a
// 200 (negative on other answers).
func (h *HTTPCheck) DoReset(ctx context.Context, subject string) (Outcome, time.Duration, error) {
	body, err := json.Marshal(checkapi.Request{Route: h.route, Subject: subject, Cost: &h.cost})
	if err != nil {
		return 0, -1, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return 0, -1, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", h.apiKey)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, -1, err
	}
	if resp.StatusCode != http.StatusOK {
		out, err := answerHTTP(req, resp)
		return out, -1, err
	}
	defer resp.Body.Close()
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer bodyBuffers.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return 0, -1, err
	}
	return Allowed, resetAfterOf(buf.Bytes()), nil
}

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// resetAfterOf is the top-level reset_after_ms of a check's answer, the
// first in its body (checkapi.Decision's field order), or -1 when absent.
// A scan rather than a decode: the load generator shares the machine.
func resetAfterOf(body []byte) time.Duration {
	const field = `"reset_after_ms":`
	i := bytes.Index(body, []byte(field))
	if i < 0 {
		return -1
	}
	ms, n := int64(0), 0
	for _, c := range body[i+len(field):] {
		if c < '0' || c > '9' {
			break
		}
		ms, n = ms*10+int64(c-'0'), n+1
	}
	if n == 0 || n > 15 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// HTTPGet is a reference target: a GET of an endpoint that does no work (such
// as /healthz), measuring what the HTTP round trip alone costs on the same
// machine and client.
type HTTPGet struct {
	client *http.Client
	url    string
}

// NewHTTPGet returns a target that GETs url.
func NewHTTPGet(url string, concurrency int) *HTTPGet {
	return &HTTPGet{client: newHTTPClient(concurrency), url: url}
}

// Do sends one GET.
func (h *HTTPGet) Do(ctx context.Context, _ string) (Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return 0, err
	}
	return doHTTP(h.client, req)
}

func doHTTP(client *http.Client, req *http.Request) (Outcome, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	return answerHTTP(req, resp)
}

// answerHTTP is the outcome of resp, the answer to req; it closes the body.
func answerHTTP(req *http.Request, resp *http.Response) (Outcome, error) {
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		// Drain so the connection is reused.
		_, err := io.Copy(io.Discard, resp.Body)
		return Allowed, err
	case http.StatusTooManyRequests:
		_, err := io.Copy(io.Discard, resp.Body)
		return Denied, err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode == http.StatusServiceUnavailable && errorCode(msg) == "overloaded" {
		return Shed, nil
	}
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return 0, fmt.Errorf("%s: HTTP %d: %s", req.URL, resp.StatusCode, bytes.TrimSpace(msg))
}

// errorCode is the code of the service's JSON error body
// ({"error":{"code":"...","message":"..."}}), or "" if body is not one.
// Only the code tells shedding apart from other 503s, such as
// store_unavailable, which are failures.
func errorCode(body []byte) string {
	var e checkapi.ErrorBody
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

func newHTTPClient(concurrency int) *http.Client {
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        concurrency * 2,
		MaxIdleConnsPerHost: concurrency * 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: transport}
}

// StoreCheck is a store checked in process, without HTTP: what the engine
// alone costs.
type StoreCheck struct {
	Store  sluice.Store
	Rule   string
	Limits []sluice.Limit
	Cost   int64
}

// Do checks one request against the store.
func (s StoreCheck) Do(ctx context.Context, subject string) (Outcome, error) {
	d, err := s.Store.Check(ctx, sluice.Request{Rule: s.Rule, Subject: subject, Limits: s.Limits, Cost: s.Cost})
	if err != nil {
		return 0, err
	}
	if !d.Allowed {
		return Denied, nil
	}
	return Allowed, nil
}

// EnvoyJSON is envoyproxy/ratelimit's HTTP face as a target: POST /json with
// a RateLimitRequest in protobuf's JSON form, answered 200 (OK) or 429
// (OVER_LIMIT). It puts the HTTP check API beside a reference service's own
// HTTP face on the same client (issue 29's HTTP comparison).
type EnvoyJSON struct {
	client *http.Client
	url    string
	build  *EnvoyCheck // builds each request; never dials
}

// NewEnvoyJSON returns a target for the /json endpoint of the service at
// baseURL (http://host:port), with the descriptors and subject key of
// NewEnvoyCheck.
func NewEnvoyJSON(baseURL, domain string, descriptors []Descriptor, subjectKey string, hits uint32, concurrency int) (*EnvoyJSON, error) {
	build, err := NewEnvoyCheck(nil, domain, descriptors, subjectKey, hits)
	if err != nil {
		return nil, err
	}
	return &EnvoyJSON{client: newHTTPClient(concurrency), url: baseURL + "/json", build: build}, nil
}

// Do sends one request for subject.
func (e *EnvoyJSON) Do(ctx context.Context, subject string) (Outcome, error) {
	body, err := protojson.Marshal(e.build.Request(subject))
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return doHTTP(e.client, req)
}
