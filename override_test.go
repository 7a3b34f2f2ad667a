package sluice

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestOverrideValidateRejectsBadInput(t *testing.T) {
	good := Override{Name: "vip", Subjects: []string{"alice", "vip-*"}, Limits: []Limit{PerMinute(1000)}}
	if err := good.Validate(); err != nil {
		t.Fatalf("good override: %v", err)
	}
	for name, mutate := range map[string]func(*Override){
		"no_subjects":     func(o *Override) { o.Subjects = nil },
		"empty_subject":   func(o *Override) { o.Subjects = []string{""} },
		"inner_star":      func(o *Override) { o.Subjects = []string{"a*b"} },
		"no_limits":       func(o *Override) { o.Limits = nil },
		"invalid_limit":   func(o *Override) { o.Limits = []Limit{TokenBucket(0, 1)} },
		"duplicate_limit": func(o *Override) { o.Limits = []Limit{PerMinute(1), PerMinute(2)} },
		"bad_name":        func(o *Override) { o.Name = "" },
	} {
		o := good
		o.Subjects = append([]string(nil), good.Subjects...)
		mutate(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate() = %v; want ErrInvalid", name, err)
		}
	}
}

func TestValidateOverridesRefusesTwoClaimsOnOneSubject(t *testing.T) {
	a := Override{Name: "a", Subjects: []string{"alice", "vip-*"}, Limits: []Limit{PerMinute(10)}}
	for _, claim := range []string{"alice", "vip-*"} {
		b := Override{Name: "b", Subjects: []string{claim}, Limits: []Limit{PerMinute(20)}}
		err := ValidateOverrides([]Override{a, b})
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"a"`) {
			t.Errorf("claim %q twice: %v; want ErrConflict naming override a", claim, err)
		}
	}
	// A pattern and an exact value that it covers are not a conflict: the
	// exact value is more specific.
	b := Override{Name: "b", Subjects: []string{"vip-1"}, Limits: []Limit{PerMinute(20)}}
	if err := ValidateOverrides([]Override{a, b}); err != nil {
		t.Errorf("exact under a pattern: %v", err)
	}
}

func TestPlansUnknownPlanNamesThePlans(t *testing.T) {
	plans := Plans{"free": {PerMinute(10)}, "pro": {PerMinute(1000)}}
	_, err := plans.Limits([]Limit{PerMinute(1)}, "gold")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "free, pro") {
		t.Fatalf("unknown plan: %v; want ErrInvalid naming free, pro", err)
	}
	if _, err := Plans(nil).Limits([]Limit{PerMinute(1)}, "pro"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("plan on a rule without plans: %v", err)
	}
	ls, err := plans.Limits([]Limit{PerMinute(1)}, "")
	if err != nil || ls[0].Capacity != 1 {
		t.Fatalf("no plan: %v %v; want the rule's limits", ls, err)
	}
	if err := (Plans{"free": nil}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty plan: %v", err)
	}
}

func TestResolveLimitsPlanThenOverride(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	plans := Plans{"pro": {PerMinute(1000)}}
	overrides := []Override{
		{Name: "week", Subjects: []string{"acme"}, Limits: []Limit{PerMinute(10000)}, ExpiresAt: now.Add(7 * 24 * time.Hour)},
		{Name: "vips", Subjects: []string{"vip-*"}, Limits: []Limit{PerMinute(5000)}},
	}
	m := NewOverrideMatcher(overrides)
	for _, c := range []struct {
		plan, subject, override string
		limit                   int64
	}{
		{"", "bob", "", 1},
		{"pro", "bob", "", 1000},
		{"pro", "acme", "week", 10000},
		{"", "vip-", "vips", 5000},
		{"pro", "vip-9", "vips", 5000},
	} {
		res, err := ResolveLimits([]Limit{PerMinute(1)}, plans, c.plan, m, c.subject, now)
		if err != nil || res.Override != c.override || res.Plan != c.plan || res.Limits[0].Capacity != c.limit {
			t.Errorf("plan %q subject %q: %+v %v; want override %q limit %d", c.plan, c.subject, res, err, c.override, c.limit)
		}
	}
	// After expiry the week-long override no longer applies, with no rebuild.
	res, _ := ResolveLimits([]Limit{PerMinute(1)}, plans, "pro", m, "acme", now.Add(7*24*time.Hour))
	if res.Override != "" || res.Limits[0].Capacity != 1000 {
		t.Errorf("expired override still applies: %+v", res)
	}
}

// referenceMatch is the definition, brute force: among active overrides,
// an exact value wins, then the longest matching prefix.
func referenceMatch(overrides []Override, subject string, now time.Time) string {
	best, bestLen := "", -1
	for _, o := range overrides {
		if !o.ActiveAt(now) {
			continue
		}
		for _, s := range o.Subjects {
			if s == subject {
				return o.Name
			}
			if p, ok := strings.CutSuffix(s, "*"); ok && strings.HasPrefix(subject, p) && len(p) > bestLen {
				best, bestLen = o.Name, len(p)
			}
		}
	}
	return best
}

func TestOverrideMatcherAgreesWithReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.Unix(1_700_000_000, 0)
		// A small alphabet makes prefixes overlap often.
		word := rapid.StringMatching(`[ab]{0,4}`)
		entry := rapid.Custom(func(t *rapid.T) string {
			w := word.Draw(t, "w")
			if w == "" || rapid.Bool().Draw(t, "pattern") {
				return w + "*"
			}
			return w
		})
		n := rapid.IntRange(0, 5).Draw(t, "n")
		claimed := map[string]bool{}
		var overrides []Override
		for i := 0; i < n; i++ {
			o := Override{Name: string(rune('a'+i)) + "o", Limits: []Limit{PerMinute(int64(i + 1))}}
			for _, s := range rapid.SliceOfN(entry, 1, 3).Draw(t, "subjects") {
				if !claimed[s] {
					claimed[s] = true
					o.Subjects = append(o.Subjects, s)
				}
			}
			if len(o.Subjects) == 0 {
				continue
			}
			if rapid.Bool().Draw(t, "expires") {
				o.ExpiresAt = now.Add(time.Duration(rapid.IntRange(-2, 2).Draw(t, "exp")) * time.Second)
			}
			overrides = append(overrides, o)
		}
		if err := ValidateOverrides(overrides); err != nil {
			t.Fatalf("generated overrides invalid: %v", err)
		}
		m := NewOverrideMatcher(overrides)
		subject := word.Draw(t, "subject")
		at := now.Add(time.Duration(rapid.IntRange(-1, 3).Draw(t, "at")) * time.Second)
		got := ""
		if o := m.Match(subject, at); o != nil {
			got = o.Name
		}
		if want := referenceMatch(overrides, subject, at); got != want {
			t.Fatalf("Match(%q) = %q; reference %q", subject, got, want)
		}
	})
}
