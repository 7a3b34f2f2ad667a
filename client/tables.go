package client

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicelabs/sluice"
)

// The tables below are how the sluice command shows what the admin and
// check APIs answer, for people; scripts read the API's JSON instead. They
// take domain types, so a listing read from the catalog database prints the
// same as one read through Admin.

// PrintTenants writes one line per tenant: name, status, creation time.
func PrintTenants(w io.Writer, ts []sluice.Tenant) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tCREATED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Status, t.CreatedAt.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

// PrintKeys writes one line per key, never its secret.
func PrintKeys(w io.Writer, ks []sluice.APIKey) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED\tREVOKED")
	for _, k := range ks {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Role, k.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	tw.Flush()
}

// PrintRules writes one line per rule, its limits as Limit.String says them.
func PrintRules(w io.Writer, rs []sluice.Rule) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROUTE\tLIMITS\tFAILURE MODE\tSHADOW")
	for _, r := range rs {
		parts := make([]string, 0, len(r.Limits))
		for _, l := range r.Limits {
			parts = append(parts, l.String())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", r.Name, r.Route, strings.Join(parts, "; "), r.FailureMode.Describe(), r.Shadow)
	}
	tw.Flush()
}

// PrintDecision says what was decided for a check on route, then each
// limit's state.
func PrintDecision(w io.Writer, route string, res Result) {
	switch {
	case res.Rule == "":
		fmt.Fprintf(w, "Allowed: no rule matches %s, so nothing was counted.\n", route)
		return
	case res.Allowed:
		fmt.Fprintf(w, "Allowed by rule %s: %d of %d remaining.\n", res.Rule, res.Remaining, res.Limit)
	default:
		fmt.Fprintf(w, "Denied by rule %s: retry after %s.\n", res.Rule, formatMs(res.RetryAfter))
	}
	if res.Shadow {
		fmt.Fprintln(w, "The rule is in shadow mode: it reports denials but allows every request.")
	}
	if res.Degraded {
		fmt.Fprintln(w, "Degraded: the store did not answer, and the rule's failure mode decided.")
	}
	if len(res.Limits) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tALGORITHM\tQUOTA\tREMAINING\tRESET AFTER\tRETRY AFTER")
	for _, l := range res.Limits {
		retry := "-"
		if l.RetryAfter > 0 {
			retry = formatMs(l.RetryAfter)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", l.Name, l.Algorithm, l.Limit, l.Remaining, formatMs(l.ResetAfter), retry)
	}
	tw.Flush()
}

// formatMs writes a duration of whole milliseconds, as the API sends them.
func formatMs(d time.Duration) string { return d.Round(time.Millisecond).String() }

// PrintAudit writes one line per audit entry, without its before and after.
func PrintAudit(w io.Writer, entries []AuditEntry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tACTOR\tTENANT\tACTION\tTARGET")
	for _, e := range entries {
		tenant := "-"
		if e.Tenant != nil {
			tenant = *e.Tenant
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Time.UTC().Format(time.RFC3339), e.Actor, tenant, e.Action, e.Target)
	}
	tw.Flush()
}

// NewAuditPage is the page GET /v1/audit answers for entries read with
// limit, made from the catalog's own entries: decoded as Admin.Audit decodes
// the server's answer, so a command prints the same whichever it read. A
// full page may have more below it, so it names the next page's Before.
func NewAuditPage(entries []sluice.AuditEntry, limit int) (AuditPage, error) {
	page := AuditPage{Entries: make([]AuditEntry, 0, len(entries))}
	for _, e := range entries {
		ce := AuditEntry{ID: e.ID, Time: e.Time.UTC(), Actor: e.Actor, Action: e.Action, Target: e.Target}
		for _, doc := range []struct {
			raw json.RawMessage
			to  *any
		}{{e.Before, &ce.Before}, {e.After, &ce.After}} {
			if doc.raw != nil {
				if err := json.Unmarshal(doc.raw, doc.to); err != nil {
					return AuditPage{}, fmt.Errorf("audit entry %d holds invalid JSON: %w", e.ID, err)
				}
			}
		}
		if e.Tenant != "" {
			ce.Tenant = &e.Tenant
		}
		page.Entries = append(page.Entries, ce)
	}
	if n := len(entries); n > 0 && n == limit {
		page.NextBefore = &entries[n-1].ID
	}
	return page, nil
}
