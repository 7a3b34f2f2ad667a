package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// AuditEntry is one recorded catalog change as GET /v1/audit spells it.
// Before and After are the thing changed in the admin API's form, decoded
// from JSON (map[string]any; nil where it did not exist, or for the admin
// token).
type AuditEntry struct {
	ID     int64     `json:"id" yaml:"id"`
	Time   time.Time `json:"time" yaml:"time"`
	Actor  string    `json:"actor" yaml:"actor"`
	Tenant *string   `json:"tenant" yaml:"tenant"`
	Action string    `json:"action" yaml:"action"`
	Target string    `json:"target" yaml:"target"`
	Before any       `json:"before" yaml:"before"`
	After  any       `json:"after" yaml:"after"`
}

// AuditQuery selects entries; zero fields select everything. A tenant admin
// key reads only its own tenant's entries.
type AuditQuery struct {
	Tenant, Actor, Action string
	Since, Until          time.Time
	// Before continues a listing: the NextBefore of the previous page.
	Before int64
	Limit  int
}

// ParseAuditTime reads a bound of an AuditQuery as people give it: a time in
// RFC 3339 (2026-12-01T17:00:00Z), or a duration back from now (24h); ""
// is no bound. Errors name the flag the value came from.
func ParseAuditTime(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is neither a time like 2026-12-01T17:00:00Z nor a duration like 24h", flag, s)
	}
	return t, nil
}

// AuditPage is one page of entries, newest first. NextBefore, when set,
// reads the next page.
type AuditPage struct {
	Entries    []AuditEntry `json:"entries" yaml:"entries"`
	NextBefore *int64       `json:"next_before" yaml:"next_before"`
}

// Audit reads one page of the audit log.
func (a *Admin) Audit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	v := url.Values{}
	for name, value := range map[string]string{"tenant": q.Tenant, "actor": q.Actor, "action": q.Action} {
		if value != "" {
			v.Set(name, value)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Before > 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var page AuditPage
	err := a.doQuery(ctx, http.MethodGet, []string{"audit"}, v, nil, &page)
	return page, err
}
