package check

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicelabs/sluice"
)

// ErrResetNotPublished is wrapped by ResetSubject when the counters are gone
// but the other instances could not be told: their deny caches may refuse
// the subject until its retry time, and repeating the reset mends it.
var ErrResetNotPublished = errors.New("the counters were reset, but telling the instances through the catalog failed " +
	"(their deny caches may refuse the subject until its retry time; repeat the reset)")

// ResetSubject gives subject back the full quota of a tenant's rule: the
// reset is recorded in the audit log (refused by the catalog, nothing is
// reset), its counters are forgotten in the store (and this engine's deny
// cache), then every instance is told through the catalog, in that order,
// since an instance told first could cache a deny from the counters about
// to go.
// Every face that resets (the admin API, the command line without a server)
// goes through here. Catalog errors reading the tenant or rule are returned
// as they are; a failed announcement wraps ErrResetNotPublished.
func (e *Engine) ResetSubject(ctx context.Context, c sluice.Catalog, tenant, rule, subject string) error {
	t, err := c.Tenant(ctx, tenant)
	if err != nil {
		return err
	}
	r, err := c.Rule(ctx, tenant, rule)
	if err != nil {
		return err
	}
	// The audit entry first: a reset the catalog cannot record is not made.
	if err := c.RecordReset(ctx, tenant, rule, subject); err != nil {
		return fmt.Errorf("record the reset in the audit log: %w", err)
	}
	// Made without NewRule: neither counted in the metrics nor observed.
	target := &Rule{Namespace: t.CounterNamespace(), Name: rule, Limits: r.Limits}
	if err := e.Reset(ctx, target, subject); err != nil {
		return fmt.Errorf("reset the counters in the store: %w", err)
	}
	if err := c.PublishReset(ctx, tenant, rule, subject); err != nil {
		return fmt.Errorf("%w: %w", ErrResetNotPublished, err)
	}
	return nil
}
