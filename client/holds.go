package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
)

// Holds (see the service's docs/holds.md): a check through a concurrency
// limit, or one that reserves its cost, returns Result.Hold; these calls give
// it back.

type holdAnswer struct {
	Status      string `json:"status"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

// Reserve is Check with cost as an estimate: an allowed Result carries a
// Hold to Settle with the actual cost once known.
func (c *Client) Reserve(ctx context.Context, route, subject string, cost int64) (Result, error) {
	return c.check(ctx, checkapi.Request{Route: route, Subject: subject, Cost: &cost, Reserve: true})
}

// Settle applies the actual cost of a hold's request: the difference from
// the estimate is refunded or charged, and its leases are freed. A hold that
// expired or was settled or released before is an *Error (409, codes
// hold_expired and hold_finished) and changes nothing; an unknown one is a
// 404 (hold_not_found).
func (c *Client) Settle(ctx context.Context, holdID string, cost int64) error {
	body, err := json.Marshal(struct {
		Cost int64 `json:"cost"`
	}{cost})
	if err != nil {
		return fmt.Errorf("sluice client: encode settle: %w", err)
	}
	_, err = c.holdCall(ctx, http.MethodPost, holdID, "/settle", body)
	return err
}

// Release frees a hold's leases; a reserved estimate stands. It is
// idempotent: the status says whether it released the hold or found it
// expired, finished or unknown.
func (c *Client) Release(ctx context.Context, holdID string) (sluice.HoldStatus, error) {
	a, err := c.holdCall(ctx, http.MethodDelete, holdID, "", nil)
	return sluice.HoldStatus(a.Status), err
}

// Extend renews a hold and its leases for another TTL from now, and returns
// its new remaining life. It is idempotent like Release.
func (c *Client) Extend(ctx context.Context, holdID string) (time.Duration, sluice.HoldStatus, error) {
	a, err := c.holdCall(ctx, http.MethodPost, holdID, "/extend", nil)
	return time.Duration(a.ExpiresInMs) * time.Millisecond, sluice.HoldStatus(a.Status), err
}

func (c *Client) holdCall(ctx context.Context, method, holdID, suffix string, body []byte) (holdAnswer, error) {
	u := strings.TrimSuffix(c.checkURL, "/v1/check") + "/v1/holds/" + url.PathEscape(holdID) + suffix
	resp, raw, err := c.send(ctx, method, u, body, "hold")
	if err != nil {
		return holdAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return holdAnswer{}, errorFrom(resp, raw)
	}
	var a holdAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return holdAnswer{}, fmt.Errorf("sluice client: the service answered a hold call with a body that is not a hold answer: %w", err)
	}
	return a, nil
}
