package sluice

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The catalog is what the rate-limit service knows about its users: tenants,
// their API keys, and their rules. It lives in a database (package postgres or
// package sqlite) and is read by the check path only through a Snapshot held
// in memory, refreshed whenever Watch reports a change, so no check ever waits
// on the database.

// TenantStatus says whether a tenant's keys may be used.
type TenantStatus string

const (
	// TenantActive tenants are served.
	TenantActive TenantStatus = "active"
	// TenantSuspended tenants keep their keys and rules, but every check and
	// self-service call with their keys is refused (403).
	TenantSuspended TenantStatus = "suspended"
)

// Valid reports whether s is a known status.
func (s TenantStatus) Valid() bool { return s == TenantActive || s == TenantSuspended }

// Validate reports whether s is a known status, in a sentence.
func (s TenantStatus) Validate() error {
	if s.Valid() {
		return nil
	}
	return invalidf("unknown tenant status %q (want active or suspended)", s)
}

// Tenant is one customer of the service: a namespace for keys, rules and
// counters.
type Tenant struct {
	Name      string
	Status    TenantStatus
	CreatedAt time.Time
	// Generation is the catalog Version that created the tenant: no other
	// tenant of the catalog, not even one created again under the same
	// name, has the same. Zero for tenants created before catalogs recorded
	// it.
	Generation int64
}

// CounterNamespace is the tenant part of its counter keys (Request.Tenant):
// its name and generation. A tenant deleted and created again under the same
// name starts with fresh counters instead of inheriting the old ones, which
// the store cannot enumerate to delete. Tenants created before generations
// were recorded keep their namespace of name and creation time in
// milliseconds, and with it their counters; '#' and '@' keep the two forms
// apart.
func (t Tenant) CounterNamespace() string {
	if t.Generation > 0 {
		return t.Name + "#" + strconv.FormatInt(t.Generation, 10)
	}
	return t.Name + "@" + strconv.FormatInt(t.CreatedAt.UnixMilli(), 10)
}

// MaxNameBytes bounds tenant, key and rule names.
const MaxNameBytes = 63

var slugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// validateSlug checks a name used in URLs and counters: what names it (kind),
// e.g. "tenant name", leads the message.
func validateSlug(kind, name string) error {
	if slugPattern.MatchString(name) {
		return nil
	}
	if name == "" {
		return invalidf("%s is required", kind)
	}
	if len(name) > MaxNameBytes {
		return invalidf("%s is %d bytes long; at most %d are allowed", kind, len(name), MaxNameBytes)
	}
	return invalidf("%s %q must be lowercase letters, digits and '-', starting with a letter or digit", kind, name)
}

// TenantName, RuleName and KeyName name tenants, rules and API keys: slugs of
// 1-63 lowercase letters, digits and '-', starting with a letter or digit, as
// they appear in URLs and counter keys. The structs hold them as strings;
// convert to validate: sluice.TenantName(name).Validate().
type (
	TenantName string
	RuleName   string
	KeyName    string
)

// Validate reports whether n is a valid tenant name, in a sentence.
func (n TenantName) Validate() error { return validateSlug("tenant name", string(n)) }

// Validate reports whether n is a valid rule name, in a sentence.
func (n RuleName) Validate() error { return validateSlug("rule name", string(n)) }

// Validate reports whether n is a valid API key name, in a sentence.
func (n KeyName) Validate() error { return validateSlug("key name", string(n)) }

// Role says what an API key may do.
type Role string

const (
	// RoleCheck keys may call the check API of their tenant.
	RoleCheck Role = "check"
	// RoleAdmin keys may manage their own tenant's keys and rules (and only
	// that tenant's); they may not check.
	RoleAdmin Role = "admin"
	// RoleMetrics keys may read /metrics on the service's listener: the
	// series of their own tenant and those that name no tenant (a
	// Prometheus scrape credential); they may neither check nor manage.
	RoleMetrics Role = "metrics"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleCheck || r == RoleAdmin || r == RoleMetrics }

// Validate reports whether r is a known role, in a sentence.
func (r Role) Validate() error {
	if r.Valid() {
		return nil
	}
	if r == "" {
		return invalidf("role is required (check, admin or metrics)")
	}
	return invalidf("unknown role %q (want check, admin or metrics)", r)
}

// APIKey describes an API key. It never holds the secret: the secret is shown
// once when the key is created, and only its SHA-256 is stored.
type APIKey struct {
	// ID is public and random ("key_" + 12 base32 characters); it names the
	// key in URLs and logs.
	ID        string
	Tenant    string
	Name      string
	Role      Role
	CreatedAt time.Time
	// RevokedAt is set once the key is revoked; a revoked key is never
	// accepted again.
	RevokedAt *time.Time
}

// APIKeyPrefix starts every API key secret, so a leaked one is recognisable
// (by secret scanners too) and cannot be confused with a key ID.
const APIKeyPrefix = "sk_"

// NewAPIKeySecret returns a new API key secret (APIKeyPrefix followed by 256
// random bits) and the hash to store for it. Show the secret once; store only
// the hash.
func NewAPIKeySecret() (secret string, hash []byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	secret = APIKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, HashAPIKey(secret)
}

// HashAPIKey returns the SHA-256 of secret: what the catalog stores and
// Snapshot.Key looks up. A fast hash is enough because the secret carries 256
// random bits; there is nothing to brute-force.
func HashAPIKey(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// KeyHash is the SHA-256 of a secret (an API key or the admin token), as
// catalogs store it.
type KeyHash []byte

// Validate reports whether h can be a SHA-256, in a sentence.
func (h KeyHash) Validate() error {
	if len(h) != sha256.Size {
		return invalidf("a key hash must be a %d-byte SHA-256, got %d bytes", sha256.Size, len(h))
	}
	return nil
}

// Validate reports what is wrong with a key about to be created (its tenant,
// name and role; ID and times are the catalog's), in a sentence.
func (k APIKey) Validate() error {
	if err := TenantName(k.Tenant).Validate(); err != nil {
		return err
	}
	if err := KeyName(k.Name).Validate(); err != nil {
		return err
	}
	return k.Role.Validate()
}

var keyIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewAPIKeyID returns a new random public key ID: "key_" and 12 base32
// characters (60 bits), enough that IDs never collide in practice; catalogs
// still enforce uniqueness.
func NewAPIKeyID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "key_" + keyIDEncoding.EncodeToString(b[:])[:12]
}

// Rule limits the requests of one tenant whose route matches Route.
type Rule struct {
	Tenant string
	Name   string
	// Route is the pattern requests are matched against; see RoutePattern.
	Route string
	// Limits are checked together, all-or-nothing.
	Limits []Limit
	// FailureMode applies when the store cannot answer. Empty means the
	// serving instance's default (--default-failure-mode, closed unless
	// set), resolved at check time; catalogs store it as empty.
	FailureMode FailureMode
	// Shadow rules are checked and counted but always allow; their denials
	// only show in the answer ("shadow": true) and in metrics.
	Shadow bool
	// Plans are named limit sets a check may choose instead of Limits.
	Plans Plans
	// Overrides are the rule's per-subject overrides, expired ones
	// included. Catalogs fill them when they read a rule and store them
	// apart (PutOverride): PutRule ignores this field.
	Overrides []Override
	UpdatedAt time.Time
}

// Describe says what r does, in one line: "route /api/*; 100 req/min
// (sliding window); failure mode: open".
func (r Rule) Describe() string {
	parts := make([]string, 0, len(r.Limits))
	for _, l := range r.Limits {
		parts = append(parts, l.String())
	}
	s := fmt.Sprintf("route %s; %s; failure mode: %s", r.Route, strings.Join(parts, ", "), r.FailureMode.Describe())
	if len(r.Plans) > 0 {
		s += "; plans: " + strings.Join(r.Plans.Names(), ", ")
	}
	if len(r.Overrides) > 0 {
		s += fmt.Sprintf("; %d override(s)", len(r.Overrides))
	}
	if r.Shadow {
		s += "; shadow"
	}
	return s
}

// Validate reports what is wrong with r, in a sentence a user understands.
func (r Rule) Validate() error {
	if err := TenantName(r.Tenant).Validate(); err != nil {
		return err
	}
	if err := RuleName(r.Name).Validate(); err != nil {
		return err
	}
	if err := RoutePattern(r.Route).Validate(); err != nil {
		return err
	}
	if err := Limits(r.Limits).Validate(); err != nil {
		return invalidf("rule %q: %s", r.Name, err.Error())
	}
	if r.FailureMode != "" && !r.FailureMode.Valid() {
		return invalidf("rule %q: unknown failure_mode %q (want closed, open or local)", r.Name, r.FailureMode)
	}
	if err := r.Plans.Validate(); err != nil {
		return invalidf("rule %q: %s", r.Name, err.Error())
	}
	return nil
}

// LimitNames returns the names of every limit r has: its own and those of
// each of its plans, sorted, each once. An override may set only these
// (see ValidateOverrideFor).
func (r Rule) LimitNames() []string {
	seen := make(map[string]bool)
	var names []string
	add := func(ls []Limit) {
		for _, l := range ls {
			if !seen[l.Name] {
				seen[l.Name] = true
				names = append(names, l.Name)
			}
		}
	}
	add(r.Limits)
	for _, p := range r.Plans.Names() {
		add(r.Plans[p])
	}
	slices.Sort(names)
	return names
}

// ValidateOverrideFor reports what is wrong with o as an override of r: o
// invalid alone, or a limit of o named like no limit r has, in its own
// limits or in any plan (a misspelt name would start fresh counters and
// leave the intended limit unset). Errors wrap ErrInvalid.
func (r Rule) ValidateOverrideFor(o Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	names := r.LimitNames()
	for _, l := range o.Limits {
		if !slices.Contains(names, l.Name) {
			return invalidf("override %q: rule %q has no limit named %q (its limits, plans included: %s)",
				o.Name, r.Name, l.Name, strings.Join(names, ", "))
		}
	}
	return nil
}

// OverridesLosingLimits returns the first override of overrides that names
// a limit r does not have, and that limit's name: replacing a rule with r
// must not leave an override setting a limit the rule no longer has.
func (r Rule) OverridesLosingLimits(overrides []Override) (override, limit string, ok bool) {
	names := r.LimitNames()
	for _, o := range overrides {
		for _, l := range o.Limits {
			if !slices.Contains(names, l.Name) {
				return o.Name, l.Name, true
			}
		}
	}
	return "", "", false
}

// Default per-tenant caps: every rule is in every instance's memory and every
// key in every snapshot, so one tenant must not grow them unbounded.
const (
	DefaultMaxRulesPerTenant     = 1000
	DefaultMaxKeysPerTenant      = 100
	DefaultMaxOverridesPerTenant = 1000
)

// TenantCaps bound what one tenant may hold in a catalog: Rules its rules,
// Keys its active (unrevoked) API keys, Overrides its overrides (of all its
// rules, expired ones included). 0 means the default
// (DefaultMaxRulesPerTenant, DefaultMaxKeysPerTenant,
// DefaultMaxOverridesPerTenant), a negative value no cap. The catalog counts inside the transaction that creates, so creates
// racing on any number of instances never pass a cap; replacing a rule or
// revoking a key is never refused.
type TenantCaps struct {
	Rules     int
	Keys      int
	Overrides int
}

// WithDefaults returns the caps with defaults filled in and every negative value -1.
func (c TenantCaps) WithDefaults() TenantCaps {
	norm := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return -1
		}
		return v
	}
	return TenantCaps{Rules: norm(c.Rules, DefaultMaxRulesPerTenant), Keys: norm(c.Keys, DefaultMaxKeysPerTenant),
		Overrides: norm(c.Overrides, DefaultMaxOverridesPerTenant)}
}

// TenantCapError is a create refused by a TenantCaps cap. It matches
// ErrTenantCap.
type TenantCapError struct {
	Tenant string
	// What is counted ("rules", "active API keys"), Have how many the
	// tenant has, Cap the cap.
	What      string
	Have, Cap int
}

func (e *TenantCapError) Error() string {
	undo := "delete one"
	if e.What == "active API keys" {
		undo = "revoke one"
	}
	return fmt.Sprintf("tenant %q already has %d %s, the most this server allows per tenant (%d); %s or ask the operator to raise the cap",
		e.Tenant, e.Have, e.What, e.Cap, undo)
}

// Is makes errors.Is(err, ErrTenantCap) true.
func (e *TenantCapError) Is(target error) bool { return target == ErrTenantCap }

// Catalog stores tenants, API keys and rules. Implementations: package
// postgres and package sqlite; both pass the same contract tests
// (internal/catalogtest).
//
// Errors wrap ErrNotFound for a missing tenant, key or rule, ErrConflict for
// a name already taken, ErrTenantCap for a create past the catalog's
// TenantCaps, and ErrInvalid (with a sentence saying what is wrong) for bad
// input. A failed call changes nothing. Every successful change bumps
// Version and is reported by Watch on every instance within a second.
type Catalog interface {
	// CreateTenant creates an active tenant.
	CreateTenant(ctx context.Context, name string) (Tenant, error)
	Tenant(ctx context.Context, name string) (Tenant, error)
	// Tenants lists all tenants by name.
	Tenants(ctx context.Context) ([]Tenant, error)
	SetTenantStatus(ctx context.Context, name string, status TenantStatus) (Tenant, error)
	// DeleteTenant deletes the tenant with its keys and rules.
	DeleteTenant(ctx context.Context, name string) error

	// CreateKey stores a key whose secret hashes to hash (see
	// NewAPIKeySecret); the catalog picks its ID.
	CreateKey(ctx context.Context, tenant, name string, role Role, hash []byte) (APIKey, error)
	// Keys lists the tenant's keys, revoked ones included, in creation order.
	Keys(ctx context.Context, tenant string) ([]APIKey, error)
	// RevokeKey revokes a key for good; revoking it again is not an error.
	RevokeKey(ctx context.Context, tenant, id string) (APIKey, error)

	// PutRule creates the rule or replaces the one of that name, and returns
	// it as stored. Two rules of one tenant may not share a route pattern
	// (ErrConflict), so matching is never ambiguous.
	PutRule(ctx context.Context, rule Rule) (Rule, error)
	Rule(ctx context.Context, tenant, name string) (Rule, error)
	// Rules lists the tenant's rules by name.
	Rules(ctx context.Context, tenant string) ([]Rule, error)
	// DeleteRule deletes the rule with its overrides.
	DeleteRule(ctx context.Context, tenant, name string) error

	// PutOverride creates the override of its rule or replaces the one of
	// that name, and returns it as stored. It is ErrNotFound without the
	// rule, ErrInvalid when it sets a limit the rule does not have (see
	// Rule.ValidateOverrideFor), ErrConflict when another override of the
	// rule claims one of its subjects, ErrTenantCap past TenantCaps.Overrides.
	PutOverride(ctx context.Context, o Override) (Override, error)
	Override(ctx context.Context, tenant, rule, name string) (Override, error)
	// Overrides lists the rule's overrides by name, expired ones included.
	Overrides(ctx context.Context, tenant, rule string) ([]Override, error)
	DeleteOverride(ctx context.Context, tenant, rule, name string) error

	// SetAdminTokenHash stores the SHA-256 of the operator token (see
	// HashAPIKey), replacing any previous one.
	SetAdminTokenHash(ctx context.Context, hash []byte) error
	// SetAdminTokenHashIfAbsent stores hash as the operator token hash only
	// if none is stored yet, and reports whether it did. Instances starting
	// at once on a fresh database each generate a token: with this exactly
	// one is kept, and the others must not print theirs. Not storing is no
	// change and does not bump Version.
	SetAdminTokenHashIfAbsent(ctx context.Context, hash []byte) (stored bool, err error)
	// AdminTokenHash returns it, or ErrNotFound when none is set.
	AdminTokenHash(ctx context.Context) ([]byte, error)

	// Audit returns the recorded changes q selects, newest first. Every
	// change above records one entry in its own transaction (see
	// AuditEntry), made by ActorOf(ctx); so does RecordReset.
	Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)

	// Snapshot reads everything the check path needs, in one consistent
	// read: tenants, active keys, rules, admin token hash, and the Version
	// they are at.
	Snapshot(ctx context.Context) (*Snapshot, error)
	// Version is a counter bumped by every change.
	Version(ctx context.Context) (int64, error)
	// Watch calls fn once with the current version, then after every change
	// made by any instance sharing the database, until ctx ends; it then
	// returns nil. Changes that land together may be reported once, with the
	// latest version, so callers reload a Snapshot when Event.Version differs
	// from theirs. Calls to fn are sequential; fn should return quickly.
	// Watch returns an error only if it cannot start.
	Watch(ctx context.Context, fn func(Event)) error
	// RecordReset records in the audit log, made by ActorOf(ctx), that the
	// counters of subject under (tenant, rule) are about to be reset. Call it
	// before resetting them: a reset the catalog cannot record is not made,
	// so no reset goes without its entry. It does not bump Version.
	RecordReset(ctx context.Context, tenant, rule, subject string) error
	// RecordTopUp records in the audit log, made by ActorOf(ctx), a top-up
	// of a credits balance about to be made (call it first, as
	// RecordReset). It does not bump Version.
	RecordTopUp(ctx context.Context, t TopUp) error
	// PublishReset tells every watching instance (this one included) that
	// the counters of subject under (tenant, rule) were reset, so they drop
	// local deny-cache entries for it: call it after resetting them. It is
	// not a catalog change, records nothing (RecordReset does) and does not
	// bump Version.
	PublishReset(ctx context.Context, tenant, rule, subject string) error

	Close() error
}

// Event is what Watch reports: the catalog Version after a change, or, when
// Reset is set, a subject reset (Version is then the latest version seen).
type Event struct {
	Version int64
	Reset   *SubjectReset
}

// SubjectReset names a subject whose counters an operator reset.
type SubjectReset struct {
	Tenant, Rule, Subject string
}

// Validate reports what is wrong with r, in a sentence.
func (r SubjectReset) Validate() error {
	if err := TenantName(r.Tenant).Validate(); err != nil {
		return err
	}
	if err := RuleName(r.Rule).Validate(); err != nil {
		return err
	}
	if len(r.Subject) > MaxSubjectBytes {
		return invalidf("subject is %d bytes, more than the %d allowed", len(r.Subject), MaxSubjectBytes)
	}
	return nil
}

// KeyGrant is what an active API key grants: who it belongs to and its role.
type KeyGrant struct {
	Tenant string
	KeyID  string
	Role   Role
}

// Snapshot is an immutable in-memory copy of the catalog, everything a check
// needs to authenticate a key, find its tenant and match a rule without a
// database call. Build it with NewSnapshot; never modify it.
type Snapshot struct {
	Version int64
	// Tenants by name.
	Tenants map[string]Tenant
	// Keys are the active (unrevoked) keys by the SHA-256 of their secret.
	Keys map[[sha256.Size]byte]KeyGrant
	// Routes are the rule tables of tenants that have rules.
	Routes map[string]*RouteTable
	// AdminTokenHash is nil when no operator token is set.
	AdminTokenHash []byte
}

// SnapshotKey is an active key as catalogs read it for NewSnapshot.
type SnapshotKey struct {
	Hash []byte
	KeyGrant
}

// NewSnapshot builds a snapshot from rows read in one transaction. Rules of
// unknown tenants and keys with malformed hashes are dropped.
func NewSnapshot(version int64, tenants []Tenant, keys []SnapshotKey, rules []Rule, adminTokenHash []byte) *Snapshot {
	s := &Snapshot{
		Version:        version,
		Tenants:        make(map[string]Tenant, len(tenants)),
		Keys:           make(map[[sha256.Size]byte]KeyGrant, len(keys)),
		Routes:         make(map[string]*RouteTable),
		AdminTokenHash: adminTokenHash,
	}
	for _, t := range tenants {
		s.Tenants[t.Name] = t
	}
	for _, k := range keys {
		if len(k.Hash) != sha256.Size {
			continue
		}
		s.Keys[[sha256.Size]byte(k.Hash)] = k.KeyGrant
	}
	byTenant := make(map[string][]Rule)
	for _, r := range rules {
		if _, ok := s.Tenants[r.Tenant]; ok {
			byTenant[r.Tenant] = append(byTenant[r.Tenant], r)
		}
	}
	for tenant, rs := range byTenant {
		s.Routes[tenant] = NewRouteTable(rs)
	}
	return s
}

// Key returns what the key with this secret grants, if it is active. It
// hashes the secret and does not allocate.
func (s *Snapshot) Key(secret string) (KeyGrant, bool) {
	// A stack buffer keeps usual-sized secrets from allocating.
	var buf [128]byte
	return s.KeyOfHash(sha256.Sum256(append(buf[:0], secret...)))
}

// KeyOfHash returns the active key whose secret has this SHA-256, for a
// caller that has hashed the secret already.
func (s *Snapshot) KeyOfHash(sum [sha256.Size]byte) (KeyGrant, bool) {
	g, ok := s.Keys[sum]
	return g, ok
}

// Match returns the tenant's rule for route (see RouteTable.Match).
func (s *Snapshot) Match(tenant, route string) (Rule, bool) {
	return s.Routes[tenant].Match(route)
}

// Rule returns the tenant's rule of that name.
func (s *Snapshot) Rule(tenant, name string) (Rule, bool) {
	t := s.Routes[tenant]
	if t == nil {
		return Rule{}, false
	}
	i, ok := slices.BinarySearchFunc(t.rules, name, func(r Rule, name string) int { return strings.Compare(r.Name, name) })
	if !ok {
		return Rule{}, false
	}
	return t.rules[i], true
}

// MaxRouteBytes bounds route patterns and the routes checked against them.
const MaxRouteBytes = 1024

// RoutePattern is a rule's route (Rule.Route): what the routes of checks
// are matched against.
//
//   - "/api/orders" matches that route exactly;
//   - "/api/orders*" matches every route starting with "/api/orders"
//     (including "/api/orders" itself and "/api/orders-old");
//   - "*" alone matches every route.
type RoutePattern string

// Validate reports whether p is a valid route pattern, in a sentence:
// a pattern starts with '/' unless it is "*", holds at most MaxRouteBytes
// bytes, no '*' except a trailing one, and no spaces or control characters.
func (pattern RoutePattern) Validate() error {
	p := string(pattern)
	switch {
	case p == "":
		return invalidf("route is required: an exact path like /api/orders, a prefix like /api/orders*, or *")
	case p == "*":
		return nil
	case len(p) > MaxRouteBytes:
		return invalidf("route is %d bytes long; at most %d are allowed", len(p), MaxRouteBytes)
	case p[0] != '/':
		return invalidf("route %q must start with '/' (or be * to match every route)", p)
	case !utf8.ValidString(p):
		return invalidf("route %q is not valid UTF-8", p)
	}
	if i := strings.IndexByte(p, '*'); i >= 0 && i != len(p)-1 {
		return invalidf("route %q may hold '*' only at its end, as a prefix match", p)
	}
	for _, c := range p {
		if c <= ' ' || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == '\u2028' || c == '\u2029' {
			return invalidf("route %q must not contain spaces or control characters", p)
		}
	}
	return nil
}
