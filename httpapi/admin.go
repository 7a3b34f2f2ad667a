package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/check"
)

// principal is who an admin call comes from: the operator (admin token), or
// a tenant's own key with the admin role, which may manage that tenant only.
type principal struct {
	operator bool
	tenant   string
	keyID    string // of a tenant admin key
}

// actor is who the audit log records p as.
func (p principal) actor() string {
	if p.operator {
		return sluice.ActorOperator
	}
	return p.keyID
}

// mayManage reports whether p may manage tenant.
func (p principal) mayManage(tenant string) bool { return p.operator || p.tenant == tenant }

var (
	errOperatorOnly = &apiError{http.StatusForbidden, "forbidden",
		"Only the operator (admin token) may do this; a tenant key manages its own tenant's keys and rules."}
	errOtherTenant = &apiError{http.StatusForbidden, "forbidden",
		"This API key belongs to another tenant; a tenant key may manage its own tenant only."}
)

// authorize authenticates an admin call: the admin token (compared by hash
// in constant time) or an active admin-role key of an active tenant.
func (a *API) authorize(r *http.Request) (principal, *apiError) {
	snap := a.state.Load().snap
	secret := presented(r)
	if secret.text == "" {
		return principal{}, &apiError{http.StatusUnauthorized, "missing_credentials",
			"Credentials are required: send the admin token as Authorization: Bearer <token>, or a tenant admin key."}
	}
	if isAdminToken(snap, secret) {
		return principal{operator: true}, nil
	}
	grant, aerr := tenantKey(snap, secret)
	if aerr != nil {
		if aerr == errUnknownKey {
			return principal{}, &apiError{http.StatusUnauthorized, "invalid_credentials",
				"The token or API key is unknown or has been revoked."}
		}
		return principal{}, aerr
	}
	if grant.Role != sluice.RoleAdmin {
		return principal{}, &apiError{http.StatusForbidden, "wrong_role",
			"This API key has the " + string(grant.Role) + " role; managing a tenant needs the admin token or a key with the admin role."}
	}
	return principal{tenant: grant.Tenant, keyID: grant.KeyID}, nil
}

// admin runs fn for an authorized caller allowed to manage the {tenant} of
// the path (any tenant when operatorOnly is false and the path has none),
// under the API's admin deadline: a hung catalog is answered with a 503 well
// before the server's write timeout, not with an empty reply.
func (a *API) admin(w http.ResponseWriter, r *http.Request, operatorOnly bool, fn func(context.Context, principal) (int, any, error)) {
	p, aerr := a.authorize(r)
	if aerr != nil {
		if aerr.status == http.StatusUnauthorized {
			a.authLog.record(r, "admin", aerr.code)
		}
		a.fail(w, aerr)
		return
	}
	if operatorOnly && !p.operator {
		a.fail(w, errOperatorOnly)
		return
	}
	if aerr := validatePath(r); aerr != nil {
		// Before anything is read or changed: a value the catalog cannot
		// store must not fail halfway through a call (a reset of the store
		// that other instances are never told of).
		a.fail(w, aerr)
		return
	}
	if tenant := r.PathValue("tenant"); tenant != "" && !p.mayManage(tenant) {
		a.fail(w, errOtherTenant)
		return
	}
	ctx, cancel := context.WithTimeout(sluice.WithActor(r.Context(), p.actor()), a.adminTimeout)
	defer cancel()
	if !a.limitWrite(ctx, w, r, p) {
		return
	}
	status, body, err := fn(ctx, p)
	if err != nil {
		e := errorFor(err)
		if e == errCatalogReadOnly {
			a.noteWrites(writesReadOnly, err) // /readyz says so before the next probe
		}
		if e.message == msgCatalogUnavailable && r.Method != http.MethodGet {
			e = &apiError{e.status, e.code, e.message + " If it stopped answering mid-call, the change may have been made: read it back before repeating a create."}
		}
		switch e.status {
		case http.StatusInternalServerError:
			a.log.Error("admin call failed", "method", r.Method, "path", r.URL.Path, "error", err)
		case http.StatusServiceUnavailable:
			a.log.Warn("admin call failed", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		a.fail(w, e)
		return
	}
	if r.Method != http.MethodGet {
		// Read-your-writes on this instance: the next call (a check with
		// the key just created, say) sees the change at once. Other
		// instances see it through Watch. The change is made: a client
		// gone now must not stop the reload, but the deadline still holds.
		deadline, _ := ctx.Deadline()
		reloadCtx, cancelReload := context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
		if err := a.reload(reloadCtx); err != nil {
			a.log.Warn("catalog snapshot reload after a change failed; Watch will retry", "error", err)
		}
		cancelReload()
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	if raw, ok := body.(rawBody); ok {
		w.Header().Set("Content-Type", raw.contentType)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(status)
		_, _ = w.Write(raw.data)
		return
	}
	writeJSON(w, status, body)
}

// rawBody is an admin answer that is not JSON (a CSV export).
type rawBody struct {
	contentType string
	data        []byte
}

// validatePath checks the values of an admin call's path: the names are
// slugs, a key ID and a subject are text without NUL, within bounds.
// ServeMux has already unescaped them, so %00 and %FF arrive as bytes.
func validatePath(r *http.Request) *apiError {
	if tenant := r.PathValue("tenant"); tenant != "" {
		if err := sluice.TenantName(tenant).Validate(); err != nil {
			return errorFor(err)
		}
	}
	if name := r.PathValue("name"); name != "" {
		if err := sluice.RuleName(name).Validate(); err != nil {
			return errorFor(err)
		}
	}
	if name := r.PathValue("override"); name != "" {
		if err := sluice.OverrideName(name).Validate(); err != nil {
			return errorFor(err)
		}
	}
	if aerr := validText("key ID", r.PathValue("id"), sluice.MaxNameBytes); aerr != nil {
		return aerr
	}
	return validText("subject", r.PathValue("subject"), MaxRequestSubjectBytes)
}

// --- tenants

func (a *API) handleCreateTenant(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, true, func(ctx context.Context, _ principal) (int, any, error) {
		var in adminapi.CreateTenant
		if aerr := decodeBody(w, r, &in); aerr != nil {
			return 0, nil, aerr
		}
		if err := sluice.TenantName(in.Name).Validate(); err != nil {
			return 0, nil, err
		}
		t, err := a.catalog.CreateTenant(ctx, in.Name)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusCreated, adminapi.NewTenant(t), nil
	})
}

func (a *API) handleListTenants(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, p principal) (int, any, error) {
		var ts []sluice.Tenant
		if p.operator {
			var err error
			if ts, err = a.catalog.Tenants(ctx); err != nil {
				return 0, nil, err
			}
		} else {
			// A tenant key sees its own tenant only.
			t, err := a.catalog.Tenant(ctx, p.tenant)
			if err != nil {
				return 0, nil, err
			}
			ts = []sluice.Tenant{t}
		}
		return http.StatusOK, adminapi.NewTenantList(ts), nil
	})
}

func (a *API) handleGetTenant(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		t, err := a.catalog.Tenant(ctx, r.PathValue("tenant"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewTenant(t), nil
	})
}

func (a *API) handlePatchTenant(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, true, func(ctx context.Context, _ principal) (int, any, error) {
		var in adminapi.SetTenantStatus
		if aerr := decodeBody(w, r, &in); aerr != nil {
			return 0, nil, aerr
		}
		if in.Status == nil {
			return 0, nil, badRequest("Field \"status\" is required: active or suspended.")
		}
		status := sluice.TenantStatus(*in.Status)
		if !status.Valid() {
			return 0, nil, badRequest("Unknown status %q (want active or suspended).", *in.Status)
		}
		t, err := a.catalog.SetTenantStatus(ctx, r.PathValue("tenant"), status)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewTenant(t), nil
	})
}

func (a *API) handleDeleteTenant(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, true, func(ctx context.Context, _ principal) (int, any, error) {
		tenant := r.PathValue("tenant")
		t, known := a.state.Load().snap.Tenants[tenant]
		if err := a.catalog.DeleteTenant(ctx, tenant); err != nil {
			return 0, nil, err
		}
		if known {
			a.engine.ForgetRule(t.CounterNamespace(), "")
		}
		return http.StatusNoContent, nil, nil
	})
}

// --- keys

// DefaultKeyName names a key created without a name: its role and a random
// suffix, since names of active keys are unique within a tenant.
func DefaultKeyName(role sluice.Role) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return string(role) + "-" + hex.EncodeToString(b[:])
}

func (a *API) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		var in adminapi.CreateKey
		if aerr := decodeBody(w, r, &in); aerr != nil {
			return 0, nil, aerr
		}
		role := sluice.Role(in.Role)
		if err := role.Validate(); err != nil {
			return 0, nil, err
		}
		if in.Name == "" {
			in.Name = DefaultKeyName(role)
		}
		if err := sluice.KeyName(in.Name).Validate(); err != nil {
			return 0, nil, err
		}
		secret, hash := sluice.NewAPIKeySecret()
		k, err := a.catalog.CreateKey(ctx, r.PathValue("tenant"), in.Name, role, hash)
		if err != nil {
			return 0, nil, err
		}
		b := adminapi.NewKey(k)
		b.Secret = secret
		return http.StatusCreated, b, nil
	})
}

func (a *API) handleListKeys(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		ks, err := a.catalog.Keys(ctx, r.PathValue("tenant"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewKeyList(ks), nil
	})
}

func (a *API) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		if _, err := a.catalog.RevokeKey(ctx, r.PathValue("tenant"), r.PathValue("id")); err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, nil
	})
}

// --- rules

// ruleFromRequest builds the rule to store. No failure mode is stored as
// none, not as this server's default: every instance then applies its own
// --default-failure-mode at check time, as it does for a rule written
// through the catalog database directly, so omitted has one meaning.
func (a *API) ruleFromRequest(tenant, name string, in adminapi.RuleSpec) (sluice.Rule, error) {
	if len(in.Limits) == 0 {
		return sluice.Rule{}, badRequest("Field \"limits\" needs at least one limit, like {\"algorithm\": \"token_bucket\", \"capacity\": 10, \"refill_per_second\": 2}.")
	}
	rule, err := in.ToRule(tenant, name)
	if err != nil {
		return rule, err
	}
	if err := rule.Validate(); err != nil {
		return rule, err
	}
	return rule, nil
}

func (a *API) handlePutRule(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		var in adminapi.RuleSpec
		if aerr := decodeBody(w, r, &in); aerr != nil {
			return 0, nil, aerr
		}
		rule, err := a.ruleFromRequest(r.PathValue("tenant"), r.PathValue("name"), in)
		if err != nil {
			return 0, nil, err
		}
		// RFC 9110 (PUT): 201 when the rule is created, 200 when one is
		// replaced. Two PUTs racing to create one rule may both answer 201;
		// the rule stored is the same either way.
		status := http.StatusOK
		if _, err := a.catalog.Rule(ctx, rule.Tenant, rule.Name); errors.Is(err, sluice.ErrNotFound) {
			status = http.StatusCreated
		} else if err != nil {
			return 0, nil, err
		}
		stored, err := a.catalog.PutRule(ctx, rule)
		if err != nil {
			return 0, nil, err
		}
		return status, adminapi.NewRule(stored), nil
	})
}

func (a *API) handleListRules(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		rs, err := a.catalog.Rules(ctx, r.PathValue("tenant"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewRuleList(rs), nil
	})
}

func (a *API) handleGetRule(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		rule, err := a.catalog.Rule(ctx, r.PathValue("tenant"), r.PathValue("name"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewRule(rule), nil
	})
}

func (a *API) handleDeleteRule(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		if err := a.catalog.DeleteRule(ctx, r.PathValue("tenant"), r.PathValue("name")); err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, nil
	})
}

// handleResetSubject forgets a subject's counters under a rule, on the store
// and in every instance's deny cache.
func (a *API) handleResetSubject(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		err := a.engine.ResetSubject(ctx, a.catalog, r.PathValue("tenant"), r.PathValue("name"), r.PathValue("subject"))
		if errors.Is(err, check.ErrResetNotPublished) {
			if e := errorFor(err); e.code == "catalog_unavailable" {
				return 0, nil, &apiError{e.status, e.code, "The subject's counters were reset, but the catalog database, " +
					"through which other instances learn of it, is unavailable: their deny caches may refuse this subject " +
					"until its retry time. Repeat the reset shortly."}
			}
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, nil
	})
}

// --- overrides

// overrideFromRequest builds the override to store, refusing one that
// would never apply: an expires_at already past is a mistake (a wrong year,
// a local time read as UTC), not a way to delete.
func (a *API) overrideFromRequest(tenant, rule, name string, in adminapi.OverrideSpec) (sluice.Override, error) {
	if len(in.Subjects) == 0 {
		return sluice.Override{}, badRequest("Field \"subjects\" is required: an exact subject like \"acme\", a pattern like \"vip-*\", or a list of them.")
	}
	for _, subject := range in.Subjects {
		// A check's subject is at most this long, so a longer one could
		// never match.
		if len(subject) > MaxRequestSubjectBytes {
			return sluice.Override{}, badRequest("Subject %.40q... is %d bytes long; checks send at most %d, so it could never match.", subject, len(subject), MaxRequestSubjectBytes)
		}
	}
	o, err := in.ToOverride(tenant, rule, name)
	if err != nil {
		return o, err
	}
	if now := a.now(); !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(now) {
		return o, badRequest("Field \"expires_at\" (%s) is in the past (it is now %s): an override must expire later, or leave expires_at out for one that never does; DELETE removes one.",
			o.ExpiresAt.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return o, nil
}

func (a *API) handlePutOverride(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		var in adminapi.OverrideSpec
		if aerr := decodeBody(w, r, &in); aerr != nil {
			return 0, nil, aerr
		}
		o, err := a.overrideFromRequest(r.PathValue("tenant"), r.PathValue("name"), r.PathValue("override"), in)
		if err != nil {
			return 0, nil, err
		}
		// 201 on create, 200 on replace, as for rules (two PUTs racing to
		// create one may both answer 201).
		status := http.StatusOK
		if _, err := a.catalog.Override(ctx, o.Tenant, o.Rule, o.Name); errors.Is(err, sluice.ErrNotFound) {
			status = http.StatusCreated
		} else if err != nil {
			return 0, nil, err
		}
		stored, err := a.catalog.PutOverride(ctx, o)
		if err != nil {
			return 0, nil, err
		}
		return status, adminapi.NewOverride(stored), nil
	})
}

func (a *API) handleListOverrides(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		os, err := a.catalog.Overrides(ctx, r.PathValue("tenant"), r.PathValue("name"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewOverrideList(os), nil
	})
}

func (a *API) handleGetOverride(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		o, err := a.catalog.Override(ctx, r.PathValue("tenant"), r.PathValue("name"), r.PathValue("override"))
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.NewOverride(o), nil
	})
}

func (a *API) handleDeleteOverride(w http.ResponseWriter, r *http.Request) {
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		if err := a.catalog.DeleteOverride(ctx, r.PathValue("tenant"), r.PathValue("name"), r.PathValue("override")); err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, nil
	})
}

// handleTopUpCredits tops up a subject's credits balance under a rule:
// POST .../subjects/{subject}/credits. The subject pattern takes the rest
// of the path (subjects may hold slashes), so the "/credits" suffix is
// matched here; exactly one is taken off, so a subject may itself end in
// "/credits".
func (a *API) handleTopUpCredits(w http.ResponseWriter, r *http.Request) {
	subject, ok := strings.CutSuffix(r.PathValue("subject"), "/credits")
	if !ok {
		a.fail(w, &apiError{http.StatusNotFound, "not_found", "POST on a subject tops up a credits limit at .../subjects/{subject}/credits."})
		return
	}
	r.SetPathValue("subject", subject)
	a.admin(w, r, false, func(ctx context.Context, _ principal) (int, any, error) {
		var in adminapi.TopUp
		if aerr := decodeBody(w, r, &in); aerr != nil {
			return 0, nil, aerr
		}
		q := check.CreditsTopUp{Tenant: r.PathValue("tenant"), Rule: r.PathValue("name"), Subject: subject,
			Limit: in.Limit, IdempotencyKey: in.IdempotencyKey}
		switch {
		case in.Limit == "":
			return 0, nil, badRequest("A top-up names its credits limit in \"limit\".")
		case (in.Add == nil) == (in.Set == nil):
			return 0, nil, badRequest("A top-up carries exactly one of \"add\" (credits to add) and \"set\" (the new balance).")
		case in.Add != nil:
			q.Add = *in.Add
		default:
			q.Set, q.SetBalance = *in.Set, true
		}
		res, err := a.engine.TopUpCredits(ctx, a.catalog, q)
		if errors.Is(err, check.ErrTopUpNotPublished) {
			if e := errorFor(err); e.code == "catalog_unavailable" {
				return 0, nil, &apiError{e.status, e.code, "The balance was topped up, but the catalog database, " +
					"through which other instances learn of it, is unavailable. Repeat the top-up with the same " +
					"idempotency_key shortly: it will not be applied twice."}
			}
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, adminapi.TopUpResult{Balance: res.Balance, Applied: res.Applied}, nil
	})
}
