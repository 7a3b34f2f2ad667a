package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicelabs/sluice/checkapi"
)

// HTTPHoldPair is an acquire/release pair on the check API as a target: a
// check that takes a hold (through a rule with a concurrency limit, or with
// reserve), then DELETE /v1/holds/{id}, measured together. An allowed check
// whose release fails is an error; a denied one sends no release.
type HTTPHoldPair struct {
	check   *HTTPCheck
	base    string
	reserve bool
}

// NewHTTPHoldPair returns a target of acquire/release pairs against the
// check API at baseURL; reserve sends "reserve": true with each check.
func NewHTTPHoldPair(baseURL, apiKey, route string, cost int64, reserve bool, concurrency int) *HTTPHoldPair {
	return &HTTPHoldPair{check: NewHTTPCheck(baseURL, apiKey, route, cost, concurrency), base: baseURL, reserve: reserve}
}

// Do takes a hold and releases it.
func (h *HTTPHoldPair) Do(ctx context.Context, subject string) (Outcome, error) {
	c := h.check
	cost := c.cost
	body, _ := json.Marshal(checkapi.Request{Route: c.route, Subject: subject, Cost: &cost, Reserve: h.reserve})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", c.apiKey)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusTooManyRequests:
		return Denied, nil
	default:
		if resp.StatusCode == http.StatusServiceUnavailable && errorCode(raw) == "overloaded" {
			return Shed, nil
		}
		return 0, fmt.Errorf("%s: HTTP %d: %s", c.url, resp.StatusCode, bytes.TrimSpace(raw[:min(len(raw), 512)]))
	}
	var d struct {
		Hold *struct {
			ID string `json:"id"`
		} `json:"hold"`
	}
	if err := json.Unmarshal(raw, &d); err != nil || d.Hold == nil {
		return 0, fmt.Errorf("%s: an allowed check without a hold: does the rule have a concurrency limit (or pass --reserve)? %s", c.url, bytes.TrimSpace(raw[:min(len(raw), 512)]))
	}
	rel, err := http.NewRequestWithContext(ctx, http.MethodDelete, h.base+"/v1/holds/"+d.Hold.ID, nil)
	if err != nil {
		return 0, err
	}
	rel.Header.Set("X-API-Key", c.apiKey)
	out, err := doHTTP(c.client, rel)
	if err != nil || out != Allowed {
		return 0, fmt.Errorf("release %s: %v (outcome %d)", d.Hold.ID, err, out)
	}
	return Allowed, nil
}
