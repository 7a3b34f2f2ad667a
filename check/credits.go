package check

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
)

// CreditsTopUp is what a top-up asks: the credits limit of a tenant's rule
// (by name), the subject, add or set, and the idempotency key.
type CreditsTopUp struct {
	Tenant, Rule, Subject, Limit string
	Add, Set                     int64
	SetBalance                   bool
	IdempotencyKey               string
}

// TopUpCredits tops up a subject's credits balance under a tenant's rule:
// the top-up is recorded in the audit log (refused by the catalog, nothing
// changes), applied in the store (atomically, once per idempotency key),
// then every instance is told through the catalog, as a subject reset is,
// so none keeps a deny of the subject from before. Every face that tops up
// goes through here. A limit the rule does not have (in its limits, its
// plans or the subject's override), or one that is not a credits limit, is
// an invalid-input error naming the credits limits there are.
func (e *Engine) TopUpCredits(ctx context.Context, c sluice.Catalog, q CreditsTopUp) (sluice.TopUpResult, error) {
	t, err := c.Tenant(ctx, q.Tenant)
	if err != nil {
		return sluice.TopUpResult{}, err
	}
	r, err := c.Rule(ctx, q.Tenant, q.Rule)
	if err != nil {
		return sluice.TopUpResult{}, err
	}
	// The limit sets the subject's checks may spend from, in the order
	// their definition of the limit is taken (its refill makes the balance
	// the store computes): the subject's own override, the rule's limits,
	// then its plans by name. A balance is one per limit name whichever
	// set a check resolved to, as counters are.
	var sets [][]sluice.Limit
	overrides, err := c.Overrides(ctx, q.Tenant, q.Rule)
	if err != nil {
		return sluice.TopUpResult{}, err
	}
	if o := sluice.NewOverrideMatcher(overrides).Match(q.Subject, time.Now()); o != nil {
		sets = append(sets, o.Limits)
	}
	sets = append(sets, r.Limits)
	for _, plan := range r.Plans.Names() {
		sets = append(sets, r.Plans[plan])
	}
	var limit *sluice.Limit
	var names []string
	for _, set := range sets {
		for i, l := range set {
			if l.Algorithm != sluice.AlgorithmCredits {
				continue
			}
			if name := fmt.Sprintf("%q", l.Name); !slices.Contains(names, name) {
				names = append(names, name)
			}
			if l.Name == q.Limit && limit == nil {
				limit = &set[i]
			}
		}
	}
	if limit == nil {
		has := "it has none"
		if len(names) > 0 {
			has = "its credits limits are " + strings.Join(names, ", ")
		}
		return sluice.TopUpResult{}, invalidTopUp(fmt.Sprintf("rule %q has no credits limit %q to top up in its limits, its plans or the subject's override; %s", q.Rule, q.Limit, has))
	}
	up := sluice.TopUp{Tenant: q.Tenant, Rule: q.Rule, Subject: q.Subject, Limit: *limit,
		Add: q.Add, Set: q.Set, SetBalance: q.SetBalance, IdempotencyKey: q.IdempotencyKey}
	if err := up.Validate(); err != nil {
		return sluice.TopUpResult{}, err
	}
	// The audit entry first: a top-up the catalog cannot record is not made.
	if err := c.RecordTopUp(ctx, up); err != nil {
		return sluice.TopUpResult{}, fmt.Errorf("record the top-up in the audit log: %w", err)
	}
	// The store counts under the tenant's counter namespace.
	up.Tenant = t.CounterNamespace()
	res, err := e.guard.TopUp(ctx, up)
	if err != nil {
		return sluice.TopUpResult{}, fmt.Errorf("top up the balance in the store: %w", err)
	}
	e.ForgetSubject(up.Tenant, q.Rule, q.Subject)
	if err := c.PublishReset(ctx, q.Tenant, q.Rule, q.Subject); err != nil {
		return res, fmt.Errorf("%w: %w", ErrTopUpNotPublished, err)
	}
	return res, nil
}

// ErrTopUpNotPublished is wrapped by TopUpCredits when the balance was
// topped up but the other instances could not be told.
var ErrTopUpNotPublished = fmt.Errorf("the balance was topped up, but telling the instances through the catalog failed " +
	"(a deny they cached from before may stand until its retry time; repeat the top-up with the same idempotency key)")

// invalidTopUp is a top-up of a limit the rule does not have as credits.
type invalidTopUp string

func (e invalidTopUp) Error() string { return string(e) }
func (e invalidTopUp) Unwrap() error { return sluice.ErrInvalid }
