// Package adminapi holds the wire types of Sluice's admin API (tenants, API
// keys, rules and their limits under /v1/tenants), as package checkapi holds
// those of POST /v1/check. The service (package httpapi), the Go client
// (package client), the web console, the catalog's audit log and the command
// line's catalog files all encode and decode these types, so none can drift
// from the others; the contract itself is docs/service.md and httpapi's
// OpenAPI document.
//
// The audit log stores a change's before and after in these forms, so a field
// is only ever added, never renamed or dropped: old entries must keep
// reading as they did.
//
// Durations on the wire are Go durations with Sluice's day and week units
// ("30s", "1m", "7d"); times are RFC 3339 in UTC. The yaml tags give the
// command line's -o yaml the same names.
package adminapi

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
)

// Tenant is a tenant: the body of GET /v1/tenants/{tenant}.
type Tenant struct {
	Name      string    `json:"name" yaml:"name"`
	Status    string    `json:"status" yaml:"status"`
	CreatedAt time.Time `json:"created_at" yaml:"created_at"`
}

// NewTenant spells t for the API.
func NewTenant(t sluice.Tenant) Tenant {
	return Tenant{Name: t.Name, Status: string(t.Status), CreatedAt: t.CreatedAt.UTC()}
}

// ToTenant reads t back (its counter generation is not on the wire).
func (t Tenant) ToTenant() sluice.Tenant {
	return sluice.Tenant{Name: t.Name, Status: sluice.TenantStatus(t.Status), CreatedAt: t.CreatedAt}
}

// Key is an API key, never with its hash. Secret is set only in the answer
// that creates the key.
type Key struct {
	ID        string     `json:"id" yaml:"id"`
	Tenant    string     `json:"tenant" yaml:"tenant"`
	Name      string     `json:"name" yaml:"name"`
	Role      string     `json:"role" yaml:"role"`
	CreatedAt time.Time  `json:"created_at" yaml:"created_at"`
	RevokedAt *time.Time `json:"revoked_at" yaml:"revoked_at"`
	Secret    string     `json:"secret,omitempty" yaml:"secret,omitempty"`
}

// NewKey spells k for the API, without a secret.
func NewKey(k sluice.APIKey) Key {
	out := Key{ID: k.ID, Tenant: k.Tenant, Name: k.Name, Role: string(k.Role), CreatedAt: k.CreatedAt.UTC()}
	if k.RevokedAt != nil {
		t := k.RevokedAt.UTC()
		out.RevokedAt = &t
	}
	return out
}

// ToKey reads k back.
func (k Key) ToKey() sluice.APIKey {
	return sluice.APIKey{ID: k.ID, Tenant: k.Tenant, Name: k.Name, Role: sluice.Role(k.Role), CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// Limit is one limit of a rule:
// {"name", "algorithm": "token_bucket", "capacity", "refill_per_second"},
// {"name", "algorithm": "sliding_window"|"fixed_window", "limit", "window": "1m"},
// a calendar {"name", "algorithm": "fixed_window", "limit", "window": "day"|"month",
// "time_zone": "Europe/Berlin"}, {"name", "algorithm": "concurrency", "limit",
// "ttl": "30s"} or {"name", "algorithm": "credits", "refill": {"every":
// "month"|"day"|"12h", "amount", "mode": "set"|"add", "max"}}.
type Limit struct {
	Name            string   `json:"name" yaml:"name"`
	Algorithm       string   `json:"algorithm" yaml:"algorithm"`
	Capacity        *int64   `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	RefillPerSecond *float64 `json:"refill_per_second,omitempty" yaml:"refill_per_second,omitempty"`
	Limit           *int64   `json:"limit,omitempty" yaml:"limit,omitempty"`
	Window          string   `json:"window,omitempty" yaml:"window,omitempty"`
	// TTL is a concurrency limit's lease time (with Limit).
	TTL string `json:"ttl,omitempty" yaml:"ttl,omitempty"`
	// Lease "auto" lets the limit be served from quota leases while a key
	// is hot (rate limits only; see sluice.Limit.Lease).
	Lease string `json:"lease,omitempty" yaml:"lease,omitempty"`
	// TimeZone is a calendar window's IANA zone (with window "day" or
	// "month"); absent is UTC.
	TimeZone string `json:"time_zone,omitempty" yaml:"time_zone,omitempty"`
	// Refill is a credits limit's schedule; absent, only top-ups raise
	// its balance.
	Refill *Refill `json:"refill,omitempty" yaml:"refill,omitempty"`
}

// Refill is a credits limit's refill: every "day" or "month" (UTC calendar)
// or a duration, amount, mode "set" or "add", and for add an optional max.
type Refill struct {
	Every  string `json:"every" yaml:"every"`
	Amount int64  `json:"amount" yaml:"amount"`
	Mode   string `json:"mode" yaml:"mode"`
	Max    *int64 `json:"max,omitempty" yaml:"max,omitempty"`
}

// NewLimit spells l for the API: every field of its algorithm.
func NewLimit(l sluice.Limit) Limit {
	out := Limit{Name: l.Name, Algorithm: string(l.Algorithm), Lease: l.Lease}
	capacity := l.Capacity
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket:
		refill := l.RefillPerSecond
		out.Capacity, out.RefillPerSecond = &capacity, &refill
	case sluice.AlgorithmConcurrency:
		out.Limit, out.TTL = &capacity, sluice.FormatWindow(l.TTL)
	case sluice.AlgorithmCredits:
		if r := l.Refill; r != (sluice.Refill{}) {
			out.Refill = &Refill{Every: r.EveryString(), Amount: r.Amount, Mode: string(r.Mode)}
			if r.Max > 0 {
				m := r.Max
				out.Refill.Max = &m
			}
		}
	case sluice.AlgorithmFixedWindow:
		out.Limit, out.Window, out.TimeZone = &capacity, sluice.FormatWindow(l.Window), l.TimeZone
		if l.Calendar != "" {
			out.Window = string(l.Calendar)
		}
	default:
		out.Limit, out.Window = &capacity, sluice.FormatWindow(l.Window)
	}
	return out
}

// ToLimit reads the limit. A missing name defaults to the algorithm's name.
// Fields of another algorithm are refused, so a typo cannot be ignored.
// Errors wrap sluice.ErrInvalid.
func (j Limit) ToLimit() (sluice.Limit, error) {
	l := sluice.Limit{Name: j.Name, Algorithm: sluice.Algorithm(j.Algorithm), Lease: j.Lease}
	if l.Name == "" {
		l.Name = j.Algorithm
	}
	if j.TTL != "" && l.Algorithm != sluice.AlgorithmConcurrency {
		return l, invalidf("Limit %q: only a concurrency limit takes a ttl", l.Name)
	}
	if j.Refill != nil && l.Algorithm != sluice.AlgorithmCredits {
		return l, invalidf("Limit %q: only a credits limit takes a refill; a %s limit refills by its own parameters", l.Name, l.Algorithm)
	}
	if j.TimeZone != "" && (l.Algorithm != sluice.AlgorithmFixedWindow || !sluice.Calendar(j.Window).Valid()) {
		return l, invalidf("Limit %q: time_zone applies to a fixed_window with window \"day\" or \"month\" only", l.Name)
	}
	switch l.Algorithm {
	case sluice.AlgorithmCredits:
		if j.Capacity != nil || j.RefillPerSecond != nil || j.Limit != nil || j.Window != "" {
			return l, invalidf("Limit %q: a credits limit takes only a refill (every, amount, mode, max), not capacity, refill_per_second, limit or window", l.Name)
		}
		if j.Refill != nil {
			r := sluice.Refill{Amount: j.Refill.Amount, Mode: sluice.RefillMode(j.Refill.Mode)}
			if j.Refill.Max != nil {
				if *j.Refill.Max <= 0 {
					return l, invalidf("Limit %q: refill max must be a positive integer, got %d", l.Name, *j.Refill.Max)
				}
				r.Max = *j.Refill.Max
			}
			if err := r.SetEvery(j.Refill.Every); err != nil {
				return l, invalidf("Limit %q: %s", l.Name, err)
			}
			if r == (sluice.Refill{}) {
				return l, invalidf("Limit %q: refill needs every, amount and mode", l.Name)
			}
			l.Refill = r
		}
	case sluice.AlgorithmConcurrency:
		if j.Capacity != nil || j.RefillPerSecond != nil || j.Window != "" {
			return l, invalidf("Limit %q: a concurrency limit takes limit and ttl, not capacity, refill_per_second or window", l.Name)
		}
		if j.Limit == nil || j.TTL == "" {
			return l, invalidf("Limit %q: a concurrency limit needs limit and ttl (like \"30s\")", l.Name)
		}
		ttl, err := sluice.ParseWindow(j.TTL)
		if err != nil {
			return l, invalidf("Limit %q: ttl %s", l.Name, err)
		}
		l.Capacity, l.TTL = *j.Limit, ttl
	case sluice.AlgorithmTokenBucket:
		if j.Limit != nil || j.Window != "" {
			return l, invalidf("Limit %q: a token_bucket takes capacity and refill_per_second, not limit or window", l.Name)
		}
		if j.Capacity == nil || j.RefillPerSecond == nil {
			return l, invalidf("Limit %q: a token_bucket needs capacity and refill_per_second", l.Name)
		}
		l.Capacity, l.RefillPerSecond = *j.Capacity, *j.RefillPerSecond
		if math.IsNaN(l.RefillPerSecond) {
			return l, invalidf("Limit %q: refill_per_second must be a positive number", l.Name)
		}
	case sluice.AlgorithmSlidingWindow, sluice.AlgorithmFixedWindow:
		if j.Capacity != nil || j.RefillPerSecond != nil {
			return l, invalidf("Limit %q: a %s takes limit and window, not capacity or refill_per_second", l.Name, l.Algorithm)
		}
		if j.Limit == nil || j.Window == "" {
			return l, invalidf("Limit %q: a %s needs limit and window (like \"1m\")", l.Name, l.Algorithm)
		}
		if c := sluice.Calendar(j.Window); c.Valid() {
			// A calendar window: Validate refuses it on a sliding window.
			l.Capacity, l.Calendar, l.TimeZone = *j.Limit, c, j.TimeZone
			break
		}
		w, err := sluice.ParseWindow(j.Window)
		if err != nil {
			return l, invalidf("Limit %q: window %s", l.Name, err)
		}
		l.Capacity, l.Window = *j.Limit, w
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	return l, nil
}

// Rule is a rule: the body of GET /v1/tenants/{tenant}/rules/{name}. An
// empty FailureMode means the rule has none: each serving instance applies
// its own --default-failure-mode.
type Rule struct {
	Tenant string  `json:"tenant" yaml:"tenant"`
	Name   string  `json:"name" yaml:"name"`
	Route  string  `json:"route" yaml:"route"`
	Limits []Limit `json:"limits" yaml:"limits"`
	// Plans are the rule's named limit sets; left out when it has none.
	Plans       map[string][]Limit `json:"plans,omitempty" yaml:"plans,omitempty"`
	FailureMode string             `json:"failure_mode" yaml:"failure_mode"`
	Shadow      bool               `json:"shadow" yaml:"shadow"`
	UpdatedAt   time.Time          `json:"updated_at" yaml:"updated_at"`
}

// NewRule spells r for the API. Its overrides are resources of their own
// (Override), not part of the rule's form.
func NewRule(r sluice.Rule) Rule {
	return Rule{Tenant: r.Tenant, Name: r.Name, Route: r.Route, FailureMode: string(r.FailureMode),
		Shadow: r.Shadow, UpdatedAt: r.UpdatedAt.UTC(), Limits: NewLimits(r.Limits), Plans: NewPlans(r.Plans)}
}

// NewPlans spells plans for the API; nil when there are none.
func NewPlans(plans sluice.Plans) map[string][]Limit {
	if len(plans) == 0 {
		return nil
	}
	out := make(map[string][]Limit, len(plans))
	for name, ls := range plans {
		out[name] = NewLimits(ls)
	}
	return out
}

// ToPlans reads plans back, each limit as ToLimit does; nil when there are
// none. Errors name the plan and wrap sluice.ErrInvalid.
func ToPlans(plans map[string][]Limit) (sluice.Plans, error) {
	if len(plans) == 0 {
		return nil, nil
	}
	out := make(sluice.Plans, len(plans))
	// In name order, so the same bad input always names the same plan.
	names := make([]string, 0, len(plans))
	for name := range plans {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ls := plans[name]
		if len(ls) == 0 {
			return nil, invalidf("Plan %q needs at least one limit.", name)
		}
		limits, err := ToLimits(ls)
		if err != nil {
			return nil, invalidf("Plan %q: %s", name, err)
		}
		out[name] = limits
	}
	return out, nil
}

// ToRule reads r back, its limits checked as ToLimit does.
func (r Rule) ToRule() (sluice.Rule, error) {
	out, err := r.Spec().ToRule(r.Tenant, r.Name)
	out.UpdatedAt = r.UpdatedAt
	return out, err
}

// Spec is what a client sets of r.
func (r Rule) Spec() RuleSpec {
	return RuleSpec{Route: r.Route, Limits: r.Limits, Plans: r.Plans, FailureMode: r.FailureMode, Shadow: r.Shadow}
}

// RuleSpec is what a client sets on a rule: the body of PUT
// /v1/tenants/{tenant}/rules/{name}, and a rule of a catalog file (whose
// YAML leaves out a failure mode of none and shadow false).
type RuleSpec struct {
	Route  string  `json:"route" yaml:"route"`
	Limits []Limit `json:"limits" yaml:"limits"`
	// Plans are named limit sets a check may name instead of Limits.
	Plans       map[string][]Limit `json:"plans,omitempty" yaml:"plans,omitempty"`
	FailureMode string             `json:"failure_mode" yaml:"failure_mode,omitempty"`
	Shadow      bool               `json:"shadow" yaml:"shadow,omitempty"`
}

// ToRule is the rule tenant/name of s, not validated as a whole (see
// sluice.Rule.Validate). Errors wrap sluice.ErrInvalid.
func (s RuleSpec) ToRule(tenant, name string) (sluice.Rule, error) {
	rule := sluice.Rule{Tenant: tenant, Name: name, Route: s.Route,
		FailureMode: sluice.FailureMode(s.FailureMode), Shadow: s.Shadow}
	limits, err := ToLimits(s.Limits)
	rule.Limits = limits
	if err != nil {
		return rule, err
	}
	rule.Plans, err = ToPlans(s.Plans)
	return rule, err
}

// NewLimits spells ls for the API.
func NewLimits(ls []sluice.Limit) []Limit {
	out := make([]Limit, 0, len(ls))
	for _, l := range ls {
		out = append(out, NewLimit(l))
	}
	return out
}

// ToLimits reads ls with ToLimit; the first error stops it.
func ToLimits(ls []Limit) ([]sluice.Limit, error) {
	out := make([]sluice.Limit, 0, len(ls))
	for _, j := range ls {
		l, err := j.ToLimit()
		if err != nil {
			return out, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Override is an override of a rule: the body of GET
// /v1/tenants/{tenant}/rules/{rule}/overrides/{name}. ExpiresAt is nil for
// an override that never expires.
type Override struct {
	Tenant    string     `json:"tenant" yaml:"tenant"`
	Rule      string     `json:"rule" yaml:"rule"`
	Name      string     `json:"name" yaml:"name"`
	Subjects  Subjects   `json:"subjects" yaml:"subjects"`
	Limits    []Limit    `json:"limits" yaml:"limits"`
	ExpiresAt *time.Time `json:"expires_at" yaml:"expires_at"`
	UpdatedAt time.Time  `json:"updated_at" yaml:"updated_at"`
}

// NewOverride spells o for the API.
func NewOverride(o sluice.Override) Override {
	out := Override{Tenant: o.Tenant, Rule: o.Rule, Name: o.Name, Subjects: Subjects(slices.Clone(o.Subjects)),
		Limits: NewLimits(o.Limits), UpdatedAt: o.UpdatedAt.UTC()}
	if out.Subjects == nil {
		out.Subjects = Subjects{}
	}
	if !o.ExpiresAt.IsZero() {
		t := o.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	return out
}

// Spec is what a client sets of o.
func (o Override) Spec() OverrideSpec {
	spec := OverrideSpec{Subjects: o.Subjects, Limits: o.Limits}
	if o.ExpiresAt != nil {
		spec.ExpiresAt = o.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return spec
}

// ToOverride reads o back, checked as OverrideSpec.ToOverride does.
func (o Override) ToOverride() (sluice.Override, error) {
	out, err := o.Spec().ToOverride(o.Tenant, o.Rule, o.Name)
	out.UpdatedAt = o.UpdatedAt
	return out, err
}

// OverrideSpec is what a client sets on an override: the body of PUT
// /v1/tenants/{tenant}/rules/{rule}/overrides/{name}, and an override of a
// catalog file. ExpiresAt is RFC 3339 ("2026-12-09T00:00:00Z"), empty for
// never.
type OverrideSpec struct {
	Subjects  Subjects `json:"subjects" yaml:"subjects"`
	Limits    []Limit  `json:"limits" yaml:"limits"`
	ExpiresAt string   `json:"expires_at,omitempty" yaml:"expires_at,omitempty"`
}

// ToOverride is the override tenant/rule/name of s, validated alone (see
// sluice.Override.Validate; whether it is in the past is the caller's
// question, which knows the time). Errors wrap sluice.ErrInvalid.
func (s OverrideSpec) ToOverride(tenant, rule, name string) (sluice.Override, error) {
	o := sluice.Override{Tenant: tenant, Rule: rule, Name: name, Subjects: slices.Clone([]string(s.Subjects))}
	if len(s.Limits) == 0 {
		return o, invalidf("Field \"limits\" needs at least one limit: the limits the override's subjects get instead of the rule's or their plan's.")
	}
	limits, err := ToLimits(s.Limits)
	if err != nil {
		return o, err
	}
	o.Limits = limits
	if s.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339Nano, s.ExpiresAt)
		if err != nil {
			return o, invalidf("Field \"expires_at\" is %q, not an RFC 3339 time like \"2026-12-09T00:00:00Z\".", s.ExpiresAt)
		}
		o.ExpiresAt = t.UTC()
	}
	return o, o.Validate()
}

// Subjects are an override's exact values and "prefix*" patterns. A single
// string is read as a list of one.
type Subjects []string

// UnmarshalJSON reads a list of strings or one string.
func (s *Subjects) UnmarshalJSON(b []byte) error {
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "\"") {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = Subjects{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return invalidf("Field \"subjects\" must be a string or a list of strings (exact values or \"prefix*\" patterns).")
	}
	*s = list
	return nil
}

// UnmarshalYAML reads a list of strings or one string.
func (s *Subjects) UnmarshalYAML(unmarshal func(any) error) error {
	var one string
	if err := unmarshal(&one); err == nil {
		*s = Subjects{one}
		return nil
	}
	var list []string
	if err := unmarshal(&list); err != nil {
		return invalidf("subjects must be a string or a list of strings (exact values or \"prefix*\" patterns)")
	}
	*s = list
	return nil
}

// The bodies of the list calls.
type (
	TenantList struct {
		Tenants []Tenant `json:"tenants" yaml:"tenants"`
	}
	KeyList struct {
		Keys []Key `json:"keys" yaml:"keys"`
	}
	RuleList struct {
		Rules []Rule `json:"rules" yaml:"rules"`
	}
	OverrideList struct {
		Overrides []Override `json:"overrides" yaml:"overrides"`
	}
)

// NewOverrideList is the body of the list of a rule's overrides.
func NewOverrideList(os []sluice.Override) OverrideList {
	out := OverrideList{Overrides: make([]Override, 0, len(os))}
	for _, o := range os {
		out.Overrides = append(out.Overrides, NewOverride(o))
	}
	return out
}

// NewTenantList, NewKeyList and NewRuleList are the bodies of the list calls
// for what the catalog holds: the server answers them, and the command line
// prints them (-o json) when it reads the catalog database itself, so both
// spell a listing alike. An empty listing is an empty list, never null.
func NewTenantList(ts []sluice.Tenant) TenantList {
	out := TenantList{Tenants: make([]Tenant, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, NewTenant(t))
	}
	return out
}

func NewKeyList(ks []sluice.APIKey) KeyList {
	out := KeyList{Keys: make([]Key, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, NewKey(k))
	}
	return out
}

func NewRuleList(rs []sluice.Rule) RuleList {
	out := RuleList{Rules: make([]Rule, 0, len(rs))}
	for _, r := range rs {
		out.Rules = append(out.Rules, NewRule(r))
	}
	return out
}

// The bodies of the other calls that send one.
type (
	// CreateTenant is the body of POST /v1/tenants.
	CreateTenant struct {
		Name string `json:"name"`
	}
	// SetTenantStatus is the body of PATCH /v1/tenants/{tenant}: active or
	// suspended; a pointer, so a missing status is told from an empty one.
	SetTenantStatus struct {
		Status *string `json:"status"`
	}
	// CreateKey is the body of POST /v1/tenants/{tenant}/keys; an empty
	// Name lets the server choose one.
	CreateKey struct {
		Name string `json:"name"`
		Role string `json:"role"`
	}
)

// invalidError is bad input: it matches sluice.ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return sluice.ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// TopUp is the body of POST
// /v1/tenants/{tenant}/rules/{name}/subjects/{subject}/credits: the credits
// limit, exactly one of add (> 0) and set (>= 0), and an idempotency key
// (a retried top-up with the same key is applied once, for 24 hours).
type TopUp struct {
	Limit          string `json:"limit"`
	Add            *int64 `json:"add,omitempty"`
	Set            *int64 `json:"set,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
}

// TopUpResult is the answer of a top-up: the balance after it, and whether
// it was applied (false for a repeated idempotency key, which changed
// nothing).
type TopUpResult struct {
	Balance int64 `json:"balance"`
	Applied bool  `json:"applied"`
}

// TopUpRecord is a top-up as the audit log records it.
type TopUpRecord struct {
	Rule    string `json:"rule"`
	Subject string `json:"subject"`
	TopUp
}

// NewTopUpRecord spells t for the audit log.
func NewTopUpRecord(t sluice.TopUp) TopUpRecord {
	rec := TopUpRecord{Rule: t.Rule, Subject: t.Subject, TopUp: TopUp{Limit: t.Limit.Name, IdempotencyKey: t.IdempotencyKey}}
	if t.SetBalance {
		set := t.Set
		rec.Set = &set
	} else {
		add := t.Add
		rec.Add = &add
	}
	return rec
}
