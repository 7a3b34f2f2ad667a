package sluice

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// The audit log records every catalog change: who made it, what it was, the
// thing changed before and after, and when. Catalogs write the entry in the
// transaction of the change, so there is no change without its entry.

// Actors of catalog changes that are not an API key.
const (
	// ActorOperator is whoever holds the admin token (or, for the
	// command line working on the database directly, its access).
	ActorOperator = "operator"
	// ActorSystem is the service itself: the admin token it generates or
	// adopts at start, and any change made without WithActor.
	ActorSystem = "system"
)

type actorKey struct{}

// WithActor returns a context whose catalog changes are recorded as made by
// actor: ActorOperator, or the ID of the tenant admin key making them.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorOf returns who ctx's catalog changes are made by (ActorSystem unless
// WithActor said otherwise).
func ActorOf(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return ActorSystem
}

// Audit actions: what a change did.
const (
	AuditTenantCreate    = "tenant.create"
	AuditTenantUpdate    = "tenant.update"
	AuditTenantDelete    = "tenant.delete"
	AuditKeyCreate       = "key.create"
	AuditKeyRevoke       = "key.revoke"
	AuditRuleCreate      = "rule.create"
	AuditRuleReplace     = "rule.replace"
	AuditRuleDelete      = "rule.delete"
	AuditOverrideCreate  = "override.create"
	AuditOverrideReplace = "override.replace"
	AuditOverrideDelete  = "override.delete"
	AuditAdminTokenSet   = "admin_token.set"
	AuditSubjectReset    = "subject.reset"
)

// AuditEntry is one recorded change.
type AuditEntry struct {
	// ID orders entries: a later change has a larger ID.
	ID   int64
	Time time.Time
	// Actor is ActorOperator, ActorSystem, or the ID of the tenant admin
	// key that made the change.
	Actor string
	// Tenant is the tenant changed; empty for the admin token.
	Tenant string
	// Action is one of the Audit* constants.
	Action string
	// Target names what changed within the tenant: the tenant's name, a key
	// ID, a rule name, a subject's rule, an override as "rule/override".
	Target string
	// Before and After are the thing changed as JSON, in the admin API's
	// form, without secrets or their hashes; nil where it did not exist
	// (before a create, after a delete) or has no form (the admin token).
	Before, After json.RawMessage
}

// Audit query bounds.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// AuditQuery selects audit entries, newest first.
type AuditQuery struct {
	// Tenant, Actor and Action, when set, keep only entries equal to them.
	Tenant, Actor, Action string
	// CurrentTenantOnly keeps, of Tenant's entries, those since it was last
	// created: what a tenant admin may read, not the history of a deleted
	// namesake.
	CurrentTenantOnly bool
	// Since and Until, when set, keep entries at or after Since and before
	// Until.
	Since, Until time.Time
	// Before, when set, keeps entries with a smaller ID: pass the last ID of
	// a page to read the next one.
	Before int64
	// Limit is the most entries returned: 1 to MaxAuditLimit, 0 for
	// DefaultAuditLimit.
	Limit int
}

// Validate reports what is wrong with q, in a sentence.
func (q AuditQuery) Validate() error {
	if q.Tenant != "" {
		if err := TenantName(q.Tenant).Validate(); err != nil {
			return err
		}
	}
	if q.CurrentTenantOnly && q.Tenant == "" {
		return invalidf("current_tenant_only needs a tenant")
	}
	if len(q.Actor) > MaxNameBytes || strings.ContainsFunc(q.Actor, isControl) {
		return invalidf("actor %q is not an actor: operator, system or an API key ID", q.Actor)
	}
	if len(q.Action) > MaxNameBytes || strings.ContainsFunc(q.Action, isControl) {
		return invalidf("action %q is not an audit action such as tenant.create or rule.replace", q.Action)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return invalidf("until (%s) must be after since (%s)", q.Until.UTC().Format(time.RFC3339), q.Since.UTC().Format(time.RFC3339))
	}
	if q.Before < 0 {
		return invalidf("before must be an entry ID, a positive number; got %d", q.Before)
	}
	if q.Limit < 0 || q.Limit > MaxAuditLimit {
		return invalidf("limit must be between 1 and %d, got %d", MaxAuditLimit, q.Limit)
	}
	return nil
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }
