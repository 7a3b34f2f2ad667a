package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/checkapi"
)

// Admin calls the admin API of a Sluice service (/v1/tenants/...) with the
// operator's admin token or a tenant key of the admin role. It is safe for
// concurrent use.
//
//	a, err := client.NewAdmin("http://sluice:8080", os.Getenv("SLUICE_TOKEN"))
//	t, err := a.CreateTenant(ctx, "acme")
//
// Errors are transport failures or an *Error carrying the service's status,
// code and message; errors.Is matches sluice.ErrNotFound (404),
// sluice.ErrConflict (409), sluice.ErrInvalid (400) and
// sluice.ErrStoreUnavailable (503).
type Admin struct {
	base  string
	token string
	http  *http.Client
}

// NewAdmin returns an Admin for the service at baseURL ("http://host:8080")
// that authenticates with token: the admin token, or an admin-role API key.
// The options are those of New; the default timeout is DefaultAdminTimeout.
func NewAdmin(baseURL, token string, opts ...Option) (*Admin, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sluice client: base URL %q must be an absolute http:// or https:// URL", baseURL)
	}
	if token == "" {
		return nil, fmt.Errorf("sluice client: an admin token or an admin API key is required")
	}
	// The options are written for a Client; they only touch its http field.
	c := &Client{http: &http.Client{Timeout: DefaultAdminTimeout}}
	for _, opt := range opts {
		opt(c)
	}
	return &Admin{base: strings.TrimRight(u.String(), "/"), token: token, http: c.http}, nil
}

// DefaultAdminTimeout bounds an admin call: longer than a check, since a call
// writes the catalog database.
const DefaultAdminTimeout = 15 * time.Second

// The admin API's types, from package adminapi (shared with the service, so
// the two cannot drift apart). An empty Rule.FailureMode (in PutRule and in
// what the server answers) means the rule has none: each serving instance
// applies its own --default-failure-mode. Key.Secret is set only in the
// answer of CreateKey.
type (
	Tenant = adminapi.Tenant
	Key    = adminapi.Key
	Limit  = adminapi.Limit
	Rule   = adminapi.Rule
	// Override is a rule's per-subject override.
	Override = adminapi.Override
)

// CreateTenant creates an active tenant (operator only).
func (a *Admin) CreateTenant(ctx context.Context, name string) (Tenant, error) {
	var t Tenant
	err := a.do(ctx, http.MethodPost, []string{"tenants"}, adminapi.CreateTenant{Name: name}, &t)
	return t, err
}

// Tenants lists the tenants: all of them for the operator, its own for a
// tenant key.
func (a *Admin) Tenants(ctx context.Context) ([]Tenant, error) {
	var out adminapi.TenantList
	err := a.do(ctx, http.MethodGet, []string{"tenants"}, nil, &out)
	return out.Tenants, err
}

// Tenant reads one tenant.
func (a *Admin) Tenant(ctx context.Context, name string) (Tenant, error) {
	var t Tenant
	err := a.do(ctx, http.MethodGet, []string{"tenants", name}, nil, &t)
	return t, err
}

// SetTenantStatus suspends ("suspended") or resumes ("active") a tenant
// (operator only).
func (a *Admin) SetTenantStatus(ctx context.Context, name, status string) (Tenant, error) {
	var t Tenant
	err := a.do(ctx, http.MethodPatch, []string{"tenants", name}, adminapi.SetTenantStatus{Status: &status}, &t)
	return t, err
}

// DeleteTenant deletes a tenant with its keys and rules (operator only).
func (a *Admin) DeleteTenant(ctx context.Context, name string) error {
	return a.do(ctx, http.MethodDelete, []string{"tenants", name}, nil, nil)
}

// CreateKey creates an API key of role "check" or "admin"; an empty name
// lets the server choose one. The answer holds the secret, shown only once.
func (a *Admin) CreateKey(ctx context.Context, tenant, name, role string) (Key, error) {
	var k Key
	err := a.do(ctx, http.MethodPost, []string{"tenants", tenant, "keys"}, adminapi.CreateKey{Name: name, Role: role}, &k)
	return k, err
}

// Keys lists a tenant's keys, revoked ones included, never their secrets.
func (a *Admin) Keys(ctx context.Context, tenant string) ([]Key, error) {
	var out adminapi.KeyList
	err := a.do(ctx, http.MethodGet, []string{"tenants", tenant, "keys"}, nil, &out)
	return out.Keys, err
}

// RevokeKey revokes the key with the given ID for good.
func (a *Admin) RevokeKey(ctx context.Context, tenant, id string) error {
	return a.do(ctx, http.MethodDelete, []string{"tenants", tenant, "keys", id}, nil, nil)
}

// PutRule creates or replaces the rule r.Tenant/r.Name with r's route,
// limits, failure mode (none when empty: the server's default) and shadow
// flag, and returns the rule stored.
func (a *Admin) PutRule(ctx context.Context, r Rule) (Rule, error) {
	var out Rule
	err := a.do(ctx, http.MethodPut, []string{"tenants", r.Tenant, "rules", r.Name}, r.Spec(), &out)
	return out, err
}

// Rules lists a tenant's rules.
func (a *Admin) Rules(ctx context.Context, tenant string) ([]Rule, error) {
	var out adminapi.RuleList
	err := a.do(ctx, http.MethodGet, []string{"tenants", tenant, "rules"}, nil, &out)
	return out.Rules, err
}

// Rule reads one rule.
func (a *Admin) Rule(ctx context.Context, tenant, name string) (Rule, error) {
	var r Rule
	err := a.do(ctx, http.MethodGet, []string{"tenants", tenant, "rules", name}, nil, &r)
	return r, err
}

// DeleteRule deletes a rule.
func (a *Admin) DeleteRule(ctx context.Context, tenant, name string) error {
	return a.do(ctx, http.MethodDelete, []string{"tenants", tenant, "rules", name}, nil, nil)
}

// PutOverride creates or replaces an override of a rule.
func (a *Admin) PutOverride(ctx context.Context, o Override) (Override, error) {
	var out Override
	err := a.do(ctx, http.MethodPut, []string{"tenants", o.Tenant, "rules", o.Rule, "overrides", o.Name}, o.Spec(), &out)
	return out, err
}

// Overrides lists a rule's overrides, expired ones included.
func (a *Admin) Overrides(ctx context.Context, tenant, rule string) ([]Override, error) {
	var out adminapi.OverrideList
	err := a.do(ctx, http.MethodGet, []string{"tenants", tenant, "rules", rule, "overrides"}, nil, &out)
	return out.Overrides, err
}

// Override reads one override.
func (a *Admin) Override(ctx context.Context, tenant, rule, name string) (Override, error) {
	var o Override
	err := a.do(ctx, http.MethodGet, []string{"tenants", tenant, "rules", rule, "overrides", name}, nil, &o)
	return o, err
}

// DeleteOverride deletes an override.
func (a *Admin) DeleteOverride(ctx context.Context, tenant, rule, name string) error {
	return a.do(ctx, http.MethodDelete, []string{"tenants", tenant, "rules", rule, "overrides", name}, nil, nil)
}

// ResetSubject forgets a subject's counters under a rule, on the store and
// in every instance's deny cache: its next request starts from a full quota.
func (a *Admin) ResetSubject(ctx context.Context, tenant, rule, subject string) error {
	return a.do(ctx, http.MethodDelete, []string{"tenants", tenant, "rules", rule, "subjects", subject}, nil, nil)
}

// do sends one admin call to /v1/ and the path segments (each escaped, so a
// subject may hold '/'), with in as its JSON body when not nil, and decodes
// a 2xx answer into out when not nil.
func (a *Admin) do(ctx context.Context, method string, segments []string, in, out any) error {
	return a.doQuery(ctx, method, segments, nil, in, out)
}

// doQuery is do with query parameters.
func (a *Admin) doQuery(ctx context.Context, method string, segments []string, query url.Values, in, out any) error {
	escaped := make([]string, len(segments))
	for i, s := range segments {
		escaped[i] = url.PathEscape(s)
	}
	target := a.base + "/v1/" + strings.Join(escaped, "/")
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("sluice client: encode request: %w", err)
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("sluice client: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.http.Do(req)
	if err != nil {
		// The token travels in a header, never in the URL: the error is
		// safe to show.
		return fmt.Errorf("sluice client: %s %s: %w", method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("sluice client: read answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorFrom(resp, raw)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("sluice client: the service answered %d with a body that is not the expected JSON: %w", resp.StatusCode, err)
	}
	return nil
}

// TopUpCredits adds to or sets a subject's balance of a rule's credits
// limit (in.Add or in.Set), once per in.IdempotencyKey: a retried top-up
// with the same key answers Applied false and changes nothing.
func (a *Admin) TopUpCredits(ctx context.Context, tenant, rule, subject string, in adminapi.TopUp) (adminapi.TopUpResult, error) {
	var out adminapi.TopUpResult
	err := a.do(ctx, http.MethodPost, []string{"tenants", tenant, "rules", rule, "subjects", subject, "credits"}, in, &out)
	return out, err
}

// PeekSubject reads what a subject has left under each limit of a rule (a
// check of cost 0, which consumes nothing): for a credits limit, its
// balance (Remaining) and the time to its next refill (ResetAfterMs).
func (a *Admin) PeekSubject(ctx context.Context, tenant, rule, subject string) (checkapi.Decision, error) {
	var out checkapi.Decision
	err := a.do(ctx, http.MethodGet, []string{"tenants", tenant, "rules", rule, "subjects", subject}, nil, &out)
	return out, err
}
