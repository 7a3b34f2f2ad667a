package sluice

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Override gives the subjects it names other limits on one rule, optionally
// until ExpiresAt (DESIGN.md, "Overrides, plans and credits"). A subject
// entry is an exact value or a "prefix*" pattern; "vip-*" matches every
// subject starting with "vip-", "vip-" itself included.
type Override struct {
	Tenant   string
	Rule     string
	Name     string
	Subjects []string
	// Limits replace the matched set (the plan's or the rule's); limits
	// keep their counters by name, algorithm and window like any rule change.
	Limits []Limit
	// ExpiresAt is when the override stops applying; zero means never.
	// Expiry is judged at check time against the clock, so no reload is
	// needed for an override to stop.
	ExpiresAt time.Time
	UpdatedAt time.Time
}

// OverrideName and PlanName name overrides and plans: slugs like rule
// names (see RuleName).
type (
	OverrideName string
	PlanName     string
)

// Validate reports whether n is a valid override name, in a sentence.
func (n OverrideName) Validate() error { return validateSlug("override name", string(n)) }

// Validate reports whether n is a valid plan name, in a sentence.
func (n PlanName) Validate() error { return validateSlug("plan name", string(n)) }

// MaxOverrideSubjects bounds the subject entries of one override.
const MaxOverrideSubjects = 1000

// Validate reports what is wrong with o alone, in a sentence a user understands.
func (o Override) Validate() error {
	if err := OverrideName(o.Name).Validate(); err != nil {
		return err
	}
	if len(o.Subjects) == 0 {
		return invalidf("override %q: subjects needs at least one exact value or \"prefix*\" pattern", o.Name)
	}
	if len(o.Subjects) > MaxOverrideSubjects {
		return invalidf("override %q: at most %d subjects, got %d", o.Name, MaxOverrideSubjects, len(o.Subjects))
	}
	for _, s := range o.Subjects {
		if s == "" {
			return invalidf("override %q: a subject may not be empty", o.Name)
		}
		if len(s) > MaxSubjectBytes {
			return invalidf("override %q: subject is %d bytes, more than the %d allowed", o.Name, len(s), MaxSubjectBytes)
		}
		if i := strings.IndexByte(s, '*'); i >= 0 && i != len(s)-1 {
			return invalidf("override %q: subject %q may hold '*' only at its end, as a prefix pattern", o.Name, s)
		}
	}
	if err := Limits(o.Limits).Validate(); err != nil {
		return invalidf("override %q: %s", o.Name, err.Error())
	}
	return nil
}

// ActiveAt reports whether o still applies at now.
func (o Override) ActiveAt(now time.Time) bool {
	return o.ExpiresAt.IsZero() || now.Before(o.ExpiresAt)
}

// ValidateOverrides checks the overrides of one rule together: each valid,
// names unique, and no exact value or pattern claimed by two of them (an
// error wrapping ErrConflict naming both), so matching is never ambiguous.
func ValidateOverrides(overrides []Override) error {
	owner := make(map[string]string)
	names := make(map[string]bool, len(overrides))
	for _, o := range overrides {
		if err := o.Validate(); err != nil {
			return err
		}
		if names[o.Name] {
			return invalidf("override name %q is used twice", o.Name)
		}
		names[o.Name] = true
		for _, s := range o.Subjects {
			if prev, ok := owner[s]; ok && prev != o.Name {
				return fmt.Errorf("override %q: subject %q is already claimed by override %q: %w", o.Name, s, prev, ErrConflict)
			}
			owner[s] = o.Name
		}
	}
	return nil
}

// Plans are a rule's named limit sets; a check names one.
type Plans map[string][]Limit

// MaxPlans bounds the plans of one rule.
const MaxPlans = 64

// Validate checks every plan's name and limit set.
func (p Plans) Validate() error {
	if len(p) > MaxPlans {
		return invalidf("at most %d plans, got %d", MaxPlans, len(p))
	}
	for _, name := range p.Names() {
		if err := PlanName(name).Validate(); err != nil {
			return err
		}
		if err := Limits(p[name]).Validate(); err != nil {
			return invalidf("plan %q: %s", name, err.Error())
		}
	}
	return nil
}

// Names returns the plan names, sorted.
func (p Plans) Names() []string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Limits returns the limit set a check naming plan gets: the rule's own
// limits for no plan, the plan's otherwise. An unknown plan is an error
// wrapping ErrInvalid that names the plans there are.
func (p Plans) Limits(ruleLimits []Limit, plan string) ([]Limit, error) {
	if plan == "" {
		return ruleLimits, nil
	}
	if ls, ok := p[plan]; ok {
		return ls, nil
	}
	if len(p) == 0 {
		return nil, invalidf("unknown plan %q: this rule has no plans", plan)
	}
	return nil, invalidf("unknown plan %q (plans: %s)", plan, strings.Join(p.Names(), ", "))
}

// OverrideMatcher finds the override that applies to a subject: an exact
// value over the longest matching prefix, expired overrides skipped. Built
// once per catalog snapshot; Match allocates nothing.
type OverrideMatcher struct {
	exact map[string]*Override
	// prefixes sorted longest first, so the first active match wins.
	prefixes []prefixOverride
}

type prefixOverride struct {
	prefix string
	o      *Override
}

// NewOverrideMatcher indexes overrides, which ValidateOverrides accepted.
func NewOverrideMatcher(overrides []Override) *OverrideMatcher {
	m := &OverrideMatcher{exact: make(map[string]*Override)}
	for i := range overrides {
		o := &overrides[i]
		for _, s := range o.Subjects {
			if p, ok := strings.CutSuffix(s, "*"); ok {
				m.prefixes = append(m.prefixes, prefixOverride{prefix: p, o: o})
			} else {
				m.exact[s] = o
			}
		}
	}
	sort.SliceStable(m.prefixes, func(i, j int) bool { return len(m.prefixes[i].prefix) > len(m.prefixes[j].prefix) })
	return m
}

// Match returns the override for subject at now, or nil. An expired
// override is skipped, so the next most specific active one applies.
func (m *OverrideMatcher) Match(subject string, now time.Time) *Override {
	if m == nil {
		return nil
	}
	if o, ok := m.exact[subject]; ok && o.ActiveAt(now) {
		return o
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(subject, p.prefix) && p.o.ActiveAt(now) {
			return p.o
		}
	}
	return nil
}

// Resolution is the limit set a check gets and what chose it.
type Resolution struct {
	Limits   []Limit
	Plan     string // the plan named, "" for none
	Override string // the override that applied, "" for none
}

// ResolveLimits picks a check's limits: the plan's (or the rule's), then
// an active override matching the subject replaces them.
func ResolveLimits(ruleLimits []Limit, plans Plans, plan string, m *OverrideMatcher, subject string, now time.Time) (Resolution, error) {
	limits, err := plans.Limits(ruleLimits, plan)
	if err != nil {
		return Resolution{}, err
	}
	res := Resolution{Limits: limits, Plan: plan}
	if o := m.Match(subject, now); o != nil {
		res.Limits, res.Override = o.Limits, o.Name
	}
	return res, nil
}
