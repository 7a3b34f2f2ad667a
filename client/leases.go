package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// Quota leases (the service's POST /v1/leases, docs/service.md): a rule
// whose every limit says "lease": "auto" lends a holder a batch of units,
// consumed in the service's store at once, that the holder admits in its
// own process without a call per request. Lease, Renew and ReturnLease are
// the calls; LeasedLimiter is the limiter built on them that most callers
// want.

// LeaseOptions are a lease call's figures.
type LeaseOptions struct {
	// Holder names this process to the service (1-57 letters, digits, '_',
	// '.' or '-'): the service shares units among holders by the demand
	// each reports.
	Holder string
	// Want is the most units asked for (at least 1).
	Want int64
	// TTL is the lease's life (0: the service's default, 1s).
	TTL time.Duration
}

// LeaseResult is a lease call's answer: the decision of a check of cost 1
// (the service's store's, or its rule's failure mode's when the store was
// unavailable) and the lease, nil when nothing was granted.
type LeaseResult struct {
	Result
	Lease *Lease
	// Returned, after a Renew, is how the old lease ended.
	Returned sluice.LeaseStatus
}

// Lease is a grant of Granted units, admissible until UsableUntil.
type Lease struct {
	ID        string
	Granted   int64
	ExpiresIn time.Duration
	// UsableUntil is when this process must stop admitting from the lease:
	// the service's usable_for_ms counted from when the call was sent.
	UsableUntil time.Time
	// sentAt is when the call was sent: the answer's waits count from it.
	sentAt time.Time
}

// Lease asks for a lease of the rule route selects, for subject. A denial
// (nothing left) is a LeaseResult with Allowed false and no Lease; a rule
// that does not lease is an *Error (409 rule_not_leased).
func (c *Client) Lease(ctx context.Context, route, subject string, opts LeaseOptions) (LeaseResult, error) {
	body, err := json.Marshal(checkapi.LeaseRequest{Route: route, Subject: subject, Holder: opts.Holder, Want: opts.Want,
		TTLMs: opts.TTL.Milliseconds()})
	if err != nil {
		return LeaseResult{}, fmt.Errorf("sluice client: encode lease: %w", err)
	}
	return c.leaseCall(ctx, c.baseURL()+"/v1/leases", body)
}

// Renew gives back the unused units of lease id and asks for a new lease of
// the same rule and subject, in one call to the service, which makes one
// store call: the id names the lease's rule and subject. An id that was
// altered, or an unknown lease of an older server's id (expired a while
// ago), is an *Error (404 lease_not_found): take a new one with Lease.
//
// An older server's id names neither, and its renew costs the service a
// store call more; RenewOf, naming the lease's route and subject, saves it.
func (c *Client) Renew(ctx context.Context, id string, unused int64, opts LeaseOptions) (LeaseResult, error) {
	return c.RenewOf(ctx, "", "", id, unused, opts)
}

// RenewOf is Renew of a lease taken for route and subject, the rule being
// the one route selects now: one store call whatever the server's version.
// An old lease the service no longer knows is not an error there: Returned
// says unknown, and the new lease stands. A lease of another route or
// subject is an *Error (400), and nothing changes. route "" is Renew.
func (c *Client) RenewOf(ctx context.Context, route, subject, id string, unused int64, opts LeaseOptions) (LeaseResult, error) {
	body, err := json.Marshal(checkapi.RenewRequest{Unused: &unused, Route: route, Subject: subject, Holder: opts.Holder, Want: opts.Want, TTLMs: opts.TTL.Milliseconds()})
	if err != nil {
		return LeaseResult{}, fmt.Errorf("sluice client: encode renew: %w", err)
	}
	return c.leaseCall(ctx, c.baseURL()+"/v1/leases/"+url.PathEscape(id)+"/renew", body)
}

// ReturnLease ends lease id, giving back its unused units. It is
// idempotent: the status says whether the units went back (returned) or
// nothing changed (expired, finished, unknown).
func (c *Client) ReturnLease(ctx context.Context, id string, unused int64) (sluice.LeaseStatus, error) {
	u := c.baseURL() + "/v1/leases/" + url.PathEscape(id) + "?unused=" + strconv.FormatInt(unused, 10)
	resp, raw, err := c.send(ctx, http.MethodDelete, u, nil, "return lease")
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errorFrom(resp, raw)
	}
	var a checkapi.ReturnAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("sluice client: the service answered a lease return with a body that is not one: %w", err)
	}
	return sluice.LeaseStatus(a.Status), nil
}

func (c *Client) baseURL() string { return strings.TrimSuffix(c.checkURL, "/v1/check") }

func (c *Client) leaseCall(ctx context.Context, u string, body []byte) (LeaseResult, error) {
	sentAt := time.Now()
	resp, raw, err := c.send(ctx, http.MethodPost, u, body, "lease")
	if err != nil {
		return LeaseResult{}, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return LeaseResult{}, errorFrom(resp, raw)
	}
	var a checkapi.LeaseAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return LeaseResult{}, fmt.Errorf("sluice client: the service answered %d with a body that is not a lease answer: %w", resp.StatusCode, err)
	}
	res := LeaseResult{Result: Result{Decision: a.StoreDecision(), Rule: a.RuleName(), Shadow: a.Shadow, Header: ratelimitheader.Copy(resp.Header)},
		Returned: sluice.LeaseStatus(a.Returned)}
	if a.Lease != nil {
		res.Lease = &Lease{ID: a.Lease.ID, Granted: a.Lease.Granted, ExpiresIn: time.Duration(a.Lease.ExpiresInMs) * time.Millisecond,
			UsableUntil: sentAt.Add(time.Duration(a.Lease.UsableForMs) * time.Millisecond), sentAt: sentAt}
	}
	return res, nil
}

// LeasedLimiter decides one route and subject's requests in this process
// from units leased from the service: a request with a unit in hand is
// admitted with no network call; one that finds none asks the service,
// with one call that decides it (as a check of cost 1) and renews the
// lease, so a deny always comes from the service's store. It never admits
// more units than the service granted, and stops admitting from a lease at
// its UsableUntil. Close returns the unused units. It is safe for
// concurrent use.
//
// When the service cannot be reached it spends only what it holds, then
// each request's error is returned (the caller's failure mode applies); a
// rule that fails open or local on the service answers by that mode.
type LeasedLimiter struct {
	c       *Client
	route   string
	subject string
	opts    LeaseOptions

	// turn serialises lease calls and guards the fields below; a channel,
	// so a caller waiting for a renewal can give up with its context.
	turn   chan struct{}
	id     string
	left   int64
	until  time.Time
	last   Result    // the answer of the last lease call, for admits' figures
	lastAt time.Time // when that call was sent
	closed bool
}

// DefaultLeaseWant is a LeasedLimiter's want when LeaseOptions.Want is 0.
const DefaultLeaseWant = 100

// NewLeasedLimiter returns a LeasedLimiter of route and subject. A zero
// opts.Holder is a random name, a zero Want DefaultLeaseWant.
func (c *Client) NewLeasedLimiter(route, subject string, opts LeaseOptions) *LeasedLimiter {
	if opts.Holder == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.Holder = "go-" + hex.EncodeToString(b[:])
	}
	if opts.Want <= 0 {
		opts.Want = DefaultLeaseWant
	}
	return &LeasedLimiter{c: c, route: route, subject: subject, opts: opts, turn: make(chan struct{}, 1)}
}

// ErrLimiterClosed is Allow's error after Close.
var ErrLimiterClosed = errors.New("sluice client: the leased limiter is closed")

func (l *LeasedLimiter) lock(ctx context.Context) error {
	select {
	case l.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *LeasedLimiter) unlock() { <-l.turn }

// Allow decides one request: from a unit in hand, or with one call to the
// service that decides it and renews the lease. A denial is a Result with
// Allowed false (the service's store had no unit left), not an error.
func (l *LeasedLimiter) Allow(ctx context.Context) (Result, error) {
	if err := l.lock(ctx); err != nil {
		return Result{}, err
	}
	defer l.unlock()
	if l.closed {
		return Result{}, ErrLimiterClosed
	}
	if l.id != "" && l.left > 0 && time.Now().Before(l.until) {
		l.left--
		return l.admitted(), nil
	}
	// Renew: the units still in hand (if any) go back; they are not
	// admitted from here on whatever the call's fate.
	id, unused := l.id, l.left
	l.id, l.left = "", 0
	var res LeaseResult
	var err error
	if id != "" {
		// The route too, so that a server whose ids name no rule (an
		// older one) also renews in one store call.
		res, err = l.c.RenewOf(ctx, l.route, l.subject, id, unused, l.opts)
		var e *Error
		if errors.As(err, &e) && e.StatusCode == http.StatusNotFound {
			// Forgotten by the service: lease afresh.
			res, err = l.c.Lease(ctx, l.route, l.subject, l.opts)
		}
	} else {
		res, err = l.c.Lease(ctx, l.route, l.subject, l.opts)
	}
	if err != nil {
		return Result{}, err
	}
	if res.Lease != nil && res.Allowed {
		// The call decided this request: one of the units is its.
		l.id, l.left, l.until = res.Lease.ID, res.Lease.Granted-1, res.Lease.UsableUntil
		l.last, l.lastAt = res.Result, res.Lease.sentAt
	}
	return res.Result, nil
}

// admitted is the Result of a request admitted from the lease: the last
// call's figures, with each limit's Remaining counting what is in hand
// (never more than could be admitted) and its ResetAfter counted down
// from when the call was sent (a window's names the window the units came
// from). Called with the turn held.
func (l *LeasedLimiter) admitted() Result {
	r := l.last
	r.Decision.Limits = make([]sluice.LimitDecision, len(l.last.Limits))
	elapsed := max(0, time.Since(l.lastAt))
	for i, ld := range l.last.Limits {
		ld.Allowed, ld.RetryAfter = true, 0
		ld.Remaining = min(ld.Limit, ld.Remaining+l.left)
		ld.ResetAfter = max(0, ld.ResetAfter-elapsed)
		r.Decision.Limits[i] = ld
	}
	r.Decision.Allowed, r.Decision.RetryAfter = true, 0
	r.Decision.Combine()
	r.Header = nil
	return r
}

// Held is the units in hand now.
func (l *LeasedLimiter) Held() int64 {
	if l.lock(context.Background()) != nil {
		return 0
	}
	defer l.unlock()
	return l.left
}

// Close returns the unused units and makes later Allows fail.
func (l *LeasedLimiter) Close(ctx context.Context) error {
	if err := l.lock(ctx); err != nil {
		return err
	}
	defer l.unlock()
	l.closed = true
	id, unused := l.id, l.left
	l.id, l.left = "", 0
	if id == "" || unused == 0 {
		return nil
	}
	_, err := l.c.ReturnLease(ctx, id, unused)
	return err
}
