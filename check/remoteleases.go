package check

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/metrics"
)

// Leases for remote holders (issue 22 item 3): a client of the service (the
// Go client's leasing limiter, the middleware's remote mode) takes a lease
// through a face (POST /v1/leases), admits from it in its own process, and
// renews or returns it with what it used. The engine is the same one that
// leases for this instance: a grant is one store call that decides as a
// check of cost 1 and grants, so a remote holder's deny always comes from
// the store's state; the store's all-or-nothing grant keeps every holder
// together within every limit.
//
// A remote lease is never kept here: the holder keeps it, and whichever
// instance it calls next renews or returns it by its id.

// Bounds of a remote lease.
const (
	MinRemoteLeaseTTL = 10 * time.Millisecond
	// MaxRemoteLeaseTTL bounds how long a remote holder's units can be
	// lost if it dies holding them.
	MaxRemoteLeaseTTL     = time.Minute
	DefaultRemoteLeaseTTL = time.Second
	// MaxRemoteHolderBytes bounds a remote holder's name: the store's
	// holder is "client." and the name (64 at most).
	MaxRemoteHolderBytes = 57
	// MaxRemoteLeaseIDSubjectBytes bounds the subject a remote lease's id
	// carries (the check API's own bound on a subject): a lease of a
	// longer subject, which no face takes now, has the store's id alone,
	// renewed in two store calls.
	MaxRemoteLeaseIDSubjectBytes = 1024
	// MaxRemoteLeaseIDBytes bounds a remote lease's id: a hold id (a
	// subject tag, '.', a 22-byte nonce), '~', and the unpadded base64 of
	// a byte of length, a rule name and a subject.
	MaxRemoteLeaseIDBytes = sluice.SubjectTagLen + 1 + 22 + 1 + maxLeaseIDSuffixBytes
	maxLeaseIDSuffixBytes = ((1+sluice.MaxNameBytes+MaxRemoteLeaseIDSubjectBytes)*8 + 5) / 6
)

// ErrRuleNotLeased is a lease asked of a rule that cannot lease: one of its
// limits does not say "lease": "auto", is a concurrency limit (holds never
// lease), or the rule has plans or overrides (a lease is of one limit set,
// and a subject's can change between checks). It wraps sluice.ErrConflict:
// the request is well formed and the rule's configuration refuses it.
var ErrRuleNotLeased = fmt.Errorf("%w: rule does not lease", sluice.ErrConflict)

// ErrLeaseNotFound is a renew of a lease the store does not know for this
// tenant (never granted to it, or forgotten a while after it expired).
var ErrLeaseNotFound = fmt.Errorf("%w: no such lease", sluice.ErrNotFound)

// LeaseQuery asks for a lease for a remote holder.
type LeaseQuery struct {
	Rule    *Rule
	Subject string
	// Holder names the remote holder (1 to MaxRemoteHolderBytes letters,
	// digits, '_', '.' or '-', starting with a letter or digit); the store
	// keeps its demand under "client." and this name.
	Holder string
	// Want is the holder's demand, 1 to sluice.MaxLeaseWant; more than the
	// rule's limits hold is asked as that much.
	Want int64
	// TTL is the lease's life, MinRemoteLeaseTTL to MaxRemoteLeaseTTL
	// (default DefaultRemoteLeaseTTL).
	TTL time.Duration
	// Now, when set, is the time the store decides at (tests only).
	Now time.Time
}

// LeaseAnswer is the engine's answer to a LeaseQuery: the decision of a
// check of cost 1 (the store's, or the rule's failure mode's when the store
// cannot answer) and, when the store granted units, the lease.
type LeaseAnswer struct {
	Decision sluice.Decision
	// Grant is the store's: Granted units (0 unless the store allowed),
	// ID, ExpiresIn.
	Grant sluice.LeaseGrant
	// ID names the lease to its holder, for a renew or return: Grant.ID
	// (the store's) with the rule and subject after it (see
	// remoteLeaseID). Empty when nothing was granted.
	ID string
	// UsableFor is how long, counted from when the holder sent its call,
	// it may admit from the lease: a quarter of the TTL short of the
	// store's expiry, and never past the end of a window the units were
	// counted in.
	UsableFor time.Duration
}

// RemoteLeases reports whether r's checks may be leased by remote holders.
func (r *Rule) RemoteLeases() error {
	switch {
	case !ruleLeases(r.Limits):
		return refuse(ErrRuleNotLeased, "every limit of rule %q must say \"lease\": \"auto\", and none may be a concurrency limit, for its quota to be leased", r.Name)
	case r.Shadow:
		return refuse(ErrRuleNotLeased, "rule %q is a shadow rule, which only observes and never denies, so it is checked directly", r.Name)
	case len(r.Plans) > 0 || r.Overrides != nil:
		return refuse(ErrRuleNotLeased, "rule %q has plans or overrides, whose limits can change between checks of one subject, so it is checked directly", r.Name)
	}
	return nil
}

// Validate reports what is wrong with q, in a sentence, applying its
// defaults.
func (q *LeaseQuery) validate() error {
	if q.TTL == 0 {
		q.TTL = DefaultRemoteLeaseTTL
	}
	switch {
	case !validHolder(q.Holder):
		return refuse(sluice.ErrInvalid, "a lease's holder must be 1 to %d letters, digits, '_', '.' or '-', starting with a letter or digit, got %q", MaxRemoteHolderBytes, truncate(q.Holder, 64))
	case q.Want < 1 || q.Want > sluice.MaxLeaseWant:
		return refuse(sluice.ErrInvalid, "a lease wants 1 to %d units, got %d", sluice.MaxLeaseWant, q.Want)
	case q.TTL < MinRemoteLeaseTTL || q.TTL > MaxRemoteLeaseTTL || q.TTL%time.Millisecond != 0:
		return refuse(sluice.ErrInvalid, "a lease's ttl is %v to %v in whole milliseconds, got %v", MinRemoteLeaseTTL, MaxRemoteLeaseTTL, q.TTL)
	}
	for _, l := range q.Rule.Limits {
		q.Want = min(q.Want, l.Capacity)
	}
	return nil
}

// Lease grants a remote holder a lease of q.Rule for q.Subject, in one store
// call that decides as a check of cost 1. Errors: sluice.ErrInvalid for a
// malformed query, ErrRuleNotLeased, ErrOverloaded when shed,
// sluice.ErrStoreUnavailable when the store cannot answer and the rule
// fails closed (a rule that fails open or local answers by its mode, with
// nothing granted).
func (e *Engine) Lease(ctx context.Context, q LeaseQuery) (LeaseAnswer, error) {
	return e.lease(ctx, q, sluice.LeaseReturn{}, metrics.QuotaCallTake)
}

// lease is Lease, renewing old when its ID is set; call is the call it
// counts as.
func (e *Engine) lease(ctx context.Context, q LeaseQuery, old sluice.LeaseReturn, call string) (LeaseAnswer, error) {
	r := q.Rule
	if err := r.RemoteLeases(); err != nil {
		return LeaseAnswer{}, err
	}
	if err := q.validate(); err != nil {
		return LeaseAnswer{}, err
	}
	req := sluice.LeaseRequest{Tenant: r.Namespace, Rule: r.Name, Subject: q.Subject, Limits: r.Limits,
		Holder: "client." + q.Holder, Want: q.Want, TTL: q.TTL, Renew: old.ID, RenewUnused: old.Unused, Now: q.Now}
	if err := req.Validate(); err != nil {
		return LeaseAnswer{}, err
	}
	e.metrics.QuotaRemoteLeaseCall(call)
	sentAt := e.clock()
	grant, err := e.guard.Lease(ctx, req)
	switch {
	case errors.Is(err, sluice.ErrInvalid), errors.Is(err, ErrOverloaded):
		return LeaseAnswer{}, err
	case err != nil && ctx.Err() != nil:
		return LeaseAnswer{}, ctx.Err()
	case err != nil:
		// The store could not answer: the rule's failure mode decides
		// this one request, and nothing is leased.
		one := sluice.Request{Tenant: req.Tenant, Rule: req.Rule, Subject: req.Subject, Limits: req.Limits, Cost: 1, Now: req.Now}
		d, ferr := e.guard.Fallback(ctx, one, r.Mode, err)
		if ferr != nil {
			return LeaseAnswer{}, ferr
		}
		return LeaseAnswer{Decision: d}, nil
	}
	if !grant.Decision.Allowed {
		return LeaseAnswer{Decision: grant.Decision, Grant: sluice.LeaseGrant{Returned: grant.Returned, ReturnedGranted: grant.ReturnedGranted}}, nil
	}
	e.metrics.QuotaLeaseUnits(metrics.QuotaUnitsGranted, grant.Granted)
	// Units left the store's counters without time passing: another
	// instance's cached deny is still exact (it only errs late), ours too.
	return LeaseAnswer{Decision: grant.Decision, Grant: grant, ID: remoteLeaseID(grant.ID, r.Name, q.Subject),
		UsableFor: leaseUntil(sentAt, q.TTL, r.Limits, grant.Decision).Sub(sentAt)}, nil
}

// ReturnLease gives back the unused units of a remote holder's lease of
// namespace, id as LeaseAnswer.ID named it (or the store's id alone). The
// status says whether the units went back; an expired, finished or unknown
// lease changes nothing, and so does an id whose rule and subject are not
// its hold id's (unknown, with no store call).
func (e *Engine) ReturnLease(ctx context.Context, namespace, id string, unused int64) (sluice.LeaseReturnResult, error) {
	ref, err := parseRemoteLeaseID(namespace, id)
	if errors.Is(err, ErrLeaseNotFound) {
		if err := (sluice.LeaseReturn{ID: ref.hold, Unused: unused}).Validate(); err != nil {
			return sluice.LeaseReturnResult{}, err
		}
		return sluice.LeaseReturnResult{Status: sluice.LeaseUnknown}, nil
	}
	if err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	return e.returnRemoteLease(ctx, namespace, ref.hold, unused)
}

// returnRemoteLease is ReturnLease of the store's id.
func (e *Engine) returnRemoteLease(ctx context.Context, namespace, id string, unused int64) (sluice.LeaseReturnResult, error) {
	ret := sluice.LeaseReturn{Tenant: namespace, ID: id, Unused: unused}
	if err := ret.Validate(); err != nil {
		return sluice.LeaseReturnResult{}, err
	}
	e.metrics.QuotaRemoteLeaseCall(metrics.QuotaCallReturn)
	res, err := e.guard.ReturnLease(ctx, ret)
	if err != nil {
		return res, err
	}
	e.remoteReturned(namespace, res, unused)
	return res, nil
}

// remoteReturned counts a remote holder's lease that ended as res says.
func (e *Engine) remoteReturned(namespace string, res sluice.LeaseReturnResult, unused int64) {
	switch res.Status {
	case sluice.LeaseReturned:
		e.metrics.QuotaLeaseUnits(metrics.QuotaUnitsReturned, unused)
		// The holder admitted granted - unused, one of them the request
		// whose call took the lease: the rest needed no call.
		e.metrics.QuotaRemoteLeaseSaved(res.Granted - unused - 1)
		// Quota came back without time passing: cached denies are stale.
		e.deny.forget(namespace, res.Rule, res.Subject)
	case sluice.LeaseExpired:
		e.metrics.QuotaLeaseUnits(metrics.QuotaUnitsExpired, unused)
	}
}

// RenewLease returns a remote holder's lease with its unused units and
// takes a new one for the same rule and subject.
//
// With the rule known before any store call it is one store call: the
// grant's, which returns the old lease first (sluice.LeaseRequest.Renew),
// so its units can be granted again. The rule is known when q.Rule is set
// (the holder named its route and subject), or when id is one LeaseAnswer.ID
// named: it carries the lease's rule and subject, rule finds the rule by
// name, as it is now, and q.Subject is the id's. An id whose rule and
// subject are not its hold id's is ErrLeaseNotFound, and nothing changes
// (no store call). An old lease the store does not know is said in the
// status, and the grant stands; one of another rule or subject than
// q.Rule's is sluice.ErrInvalid, and nothing changes. A rule that no longer
// leases, or no longer exists, is ErrRuleNotLeased, the old lease returned
// all the same.
//
// Otherwise (the store's id alone, from an older server) it is two store
// calls, the return then the grant: rule finds the rule the lease was of,
// by name, as it is now: a rule that changed so that it no longer leases
// is ErrRuleNotLeased (the old lease is returned all the same). An unknown
// lease is ErrLeaseNotFound and nothing is granted.
func (e *Engine) RenewLease(ctx context.Context, namespace, id string, unused int64, rule func(name string) *Rule, q LeaseQuery) (sluice.LeaseReturnResult, LeaseAnswer, error) {
	ref, err := parseRemoteLeaseID(namespace, id)
	if err != nil {
		return sluice.LeaseReturnResult{}, LeaseAnswer{}, err
	}
	id = ref.hold
	if q.Rule == nil && ref.named {
		if err := q.validateShape(); err != nil {
			return sluice.LeaseReturnResult{}, LeaseAnswer{}, err
		}
		if q.Rule = rule(ref.rule); q.Rule == nil {
			e.metrics.QuotaRemoteLeaseCall(metrics.QuotaCallRenew)
			res, rerr := e.returnRemoteLease(ctx, namespace, id, unused)
			if rerr != nil {
				return res, LeaseAnswer{}, rerr
			}
			return res, LeaseAnswer{}, refuse(ErrRuleNotLeased, "rule %q of the lease no longer exists", ref.rule)
		}
		q.Subject = ref.subject
	}
	if q.Rule != nil {
		ret := sluice.LeaseReturn{Tenant: namespace, ID: id, Unused: unused}
		if err := ret.Validate(); err != nil {
			return sluice.LeaseReturnResult{}, LeaseAnswer{}, err
		}
		ans, err := e.lease(ctx, q, ret, metrics.QuotaCallRenew)
		if errors.Is(err, ErrRuleNotLeased) {
			// Nothing was asked of the store: the old lease goes back
			// all the same.
			res, rerr := e.returnRemoteLease(ctx, namespace, id, unused)
			if rerr != nil {
				return res, LeaseAnswer{}, rerr
			}
			return res, LeaseAnswer{}, err
		}
		if err != nil {
			return sluice.LeaseReturnResult{}, ans, err
		}
		res := sluice.LeaseReturnResult{Status: ans.Grant.Returned, Rule: q.Rule.Name, Subject: q.Subject, Granted: ans.Grant.ReturnedGranted}
		if res.Status == "" {
			// The store could not answer: the failure mode decided and
			// the old lease's fate is unknown (its units stay in the
			// store until it expires, or a return finds it).
			res.Status = sluice.LeaseUnknown
		} else {
			e.remoteReturned(namespace, res, unused)
		}
		return res, ans, nil
	}
	if err := q.validateShape(); err != nil {
		return sluice.LeaseReturnResult{}, LeaseAnswer{}, err
	}
	e.metrics.QuotaRemoteLeaseCall(metrics.QuotaCallRenew)
	res, err := e.returnRemoteLease(ctx, namespace, id, unused)
	if err != nil {
		return res, LeaseAnswer{}, err
	}
	if res.Status == sluice.LeaseUnknown {
		return res, LeaseAnswer{}, refuse(ErrLeaseNotFound, "no lease of this tenant has id %q (never granted to it, or expired a while ago); take a new one", truncate(id, 64))
	}
	q.Rule = rule(res.Rule)
	if q.Rule == nil {
		return res, LeaseAnswer{}, refuse(ErrRuleNotLeased, "rule %q of the lease no longer exists", res.Rule)
	}
	q.Subject = res.Subject
	ans, err := e.Lease(ctx, q)
	return res, ans, err
}

// A remote lease's id is the store's (a hold id) with the lease's rule and
// subject after a '~' (URL-safe, so a path carries it unescaped): a renew
// that names neither still knows the rule before it calls the store. The
// hold id's subject tag, a hash of the namespace, rule and subject, checks
// them with no store call; the store checks the lease is of them again.

// remoteLeaseID is the id a remote holder gets for the store's id of a
// lease of rule and subject: the store's alone when they are too long to
// carry (MaxRemoteLeaseIDSubjectBytes).
func remoteLeaseID(id, rule, subject string) string {
	if id == "" || len(rule) > sluice.MaxNameBytes || len(subject) > MaxRemoteLeaseIDSubjectBytes {
		return id
	}
	raw := make([]byte, 0, 1+len(rule)+len(subject))
	raw = append(raw, byte(len(rule)))
	raw = append(raw, rule...)
	raw = append(raw, subject...)
	buf := make([]byte, 0, len(id)+1+base64.RawURLEncoding.EncodedLen(len(raw)))
	buf = append(buf, id...)
	buf = append(buf, '~')
	return string(base64.RawURLEncoding.AppendEncode(buf, raw))
}

// remoteLeaseRef is a remote lease's id, read.
type remoteLeaseRef struct {
	hold string // the store's id
	// named: the id carried rule and subject, checked against hold.
	named         bool
	rule, subject string
}

// parseRemoteLeaseID reads id, a remote lease's of namespace. An id that
// carries a rule and subject that do not decode is sluice.ErrInvalid; one
// whose rule and subject are not its hold id's is ErrLeaseNotFound (a
// forged or garbled id: no lease of this tenant has it). An id without
// them is the store's, checked by the store.
func parseRemoteLeaseID(namespace, id string) (remoteLeaseRef, error) {
	hold, suffix, named := strings.Cut(id, "~")
	ref := remoteLeaseRef{hold: hold}
	if !named {
		return ref, nil
	}
	malformed := refuse(sluice.ErrInvalid, "lease id %q is malformed: want the id a lease grant returned", truncate(id, 64))
	tag, _, err := sluice.SplitHoldID(hold)
	if err != nil || len(suffix) > maxLeaseIDSuffixBytes {
		return ref, malformed
	}
	raw, err := base64.RawURLEncoding.DecodeString(suffix)
	if err != nil || len(raw) == 0 || raw[0] == 0 || int(raw[0]) > len(raw)-1 {
		return ref, malformed
	}
	rule, subject := string(raw[1:1+raw[0]]), string(raw[1+raw[0]:])
	var buf [sluice.SubjectTagLen]byte
	if string(sluice.AppendSubjectTag(buf[:0], namespace, rule, subject)) != tag {
		return ref, refuse(ErrLeaseNotFound, "no lease of this tenant has id %q (its rule and subject are not its lease's); take a new one", truncate(id, 64))
	}
	ref.named, ref.rule, ref.subject = true, rule, subject
	return ref, nil
}

// validateShape checks what of q needs no rule.
func (q *LeaseQuery) validateShape() error {
	r := q.Rule
	q.Rule = &Rule{}
	defer func() { q.Rule = r }()
	return q.validate()
}

// validHolder reports whether name can name a remote holder.
func validHolder(name string) bool {
	if len(name) == 0 || len(name) > MaxRemoteHolderBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// refusal is a lease call refused, its message a sentence of its own (not
// prefixed by its kind's).
type refusal struct {
	msg  string
	kind error
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...), kind: kind}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
