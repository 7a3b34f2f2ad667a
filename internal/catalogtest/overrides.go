package catalogtest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

// testPlans: a rule's plans are stored with it, read back equal (in the
// snapshot too), and replaced with it.
func testPlans(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	r := rule("acme", "api", "/api*", sluice.PerMinute(10).Named("minute"))
	r.Plans = sluice.Plans{
		"free": {sluice.PerMinute(2).Named("minute")},
		"pro":  {leased(sluice.PerMinute(100).Named("minute")), sluice.TokenBucket(20, 5).Named("burst")},
	}
	must(c.PutRule(ctx, r))(t)
	got := must(c.Rule(ctx, "acme", "api"))(t)
	if !reflect.DeepEqual(got.Plans, r.Plans) {
		t.Fatalf("plans read back %+v\nwant %+v", got.Plans, r.Plans)
	}
	snap := must(c.Snapshot(ctx))(t)
	if inSnap, _ := snap.Rule("acme", "api"); !reflect.DeepEqual(inSnap.Plans, r.Plans) {
		t.Fatalf("plans in the snapshot %+v", inSnap.Plans)
	}
	r.Plans = nil
	must(c.PutRule(ctx, r))(t)
	if got := must(c.Rule(ctx, "acme", "api"))(t); got.Plans != nil {
		t.Fatalf("plans after a replace without them: %+v", got.Plans)
	}
}

// testOverrides: create, replace, read, list, delete; refusals that change
// nothing; the snapshot carries a rule's overrides; deleting the rule
// deletes them; the cap counts a tenant's overrides across its rules.
func testOverrides(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	r := rule("acme", "api", "/api*", sluice.PerMinute(10).Named("minute"))
	r.Plans = sluice.Plans{"pro": {sluice.PerMinute(100).Named("minute"), sluice.FixedWindow(1000, 24*time.Hour).Named("day")}}
	must(c.PutRule(ctx, r))(t)
	must(c.PutRule(ctx, rule("acme", "web", "/web*", sluice.PerMinute(10).Named("minute"))))(t)

	expires := time.Now().Add(7 * 24 * time.Hour).Truncate(time.Millisecond).UTC()
	week := sluice.Override{Tenant: "acme", Rule: "api", Name: "launch-week", Subjects: []string{"bigco", "partner-*"},
		Limits: []sluice.Limit{sluice.PerMinute(1000).Named("minute"), sluice.FixedWindow(5000, 24*time.Hour).Named("day")}, ExpiresAt: expires}
	stored := must(c.PutOverride(ctx, week))(t)
	if stored.UpdatedAt.IsZero() || !stored.ExpiresAt.Equal(expires) {
		t.Fatalf("PutOverride = %+v", stored)
	}
	assertOverride(t, must(c.Override(ctx, "acme", "api", "launch-week"))(t), stored)

	forever := sluice.Override{Tenant: "acme", Rule: "api", Name: "vips", Subjects: []string{"vip-*"}, Limits: []sluice.Limit{sluice.PerMinute(50).Named("minute")}}
	must(c.PutOverride(ctx, forever))(t)
	forever.Limits = []sluice.Limit{sluice.PerMinute(60).Named("minute")}
	replaced := must(c.PutOverride(ctx, forever))(t)
	list := must(c.Overrides(ctx, "acme", "api"))(t)
	if len(list) != 2 || list[0].Name != "launch-week" || list[1].Name != "vips" {
		t.Fatalf("Overrides = %+v", list)
	}
	assertOverride(t, list[1], replaced)
	if !list[1].ExpiresAt.IsZero() {
		t.Fatalf("an override without expiry reads back expiring at %v", list[1].ExpiresAt)
	}

	snapRule, _ := must(c.Snapshot(ctx))(t).Rule("acme", "api")
	if len(snapRule.Overrides) != 2 || snapRule.Overrides[0].Name != "launch-week" {
		t.Fatalf("snapshot's rule has overrides %+v", snapRule.Overrides)
	}

	v := version(t, c)
	for name, o := range map[string]sluice.Override{
		"claims_a_taken_exact_value": {Tenant: "acme", Rule: "api", Name: "x", Subjects: []string{"bigco"}, Limits: forever.Limits},
		"claims_a_taken_pattern":     {Tenant: "acme", Rule: "api", Name: "x", Subjects: []string{"partner-*"}, Limits: forever.Limits},
	} {
		_, err := c.PutOverride(ctx, o)
		wantErr(t, name, err, sluice.ErrConflict)
	}
	for name, o := range map[string]sluice.Override{
		"limit_the_rule_does_not_have": {Tenant: "acme", Rule: "api", Name: "x", Subjects: []string{"y"}, Limits: []sluice.Limit{sluice.PerHour(5).Named("hour")}},
		"no_subjects":                  {Tenant: "acme", Rule: "api", Name: "x", Limits: forever.Limits},
		"bad_name":                     {Tenant: "acme", Rule: "api", Name: "X!", Subjects: []string{"y"}, Limits: forever.Limits},
	} {
		_, err := c.PutOverride(ctx, o)
		wantErr(t, name, err, sluice.ErrInvalid)
	}
	_, err := c.PutOverride(ctx, sluice.Override{Tenant: "acme", Rule: "nope", Name: "x", Subjects: []string{"y"}, Limits: forever.Limits})
	wantErr(t, "override of a missing rule", err, sluice.ErrNotFound)
	// A replacement of the rule that drops "day", which launch-week sets.
	_, err = c.PutRule(ctx, rule("acme", "api", "/api*", sluice.PerMinute(10).Named("minute")))
	wantErr(t, "rule replaced without a limit an override sets", err, sluice.ErrConflict)
	if after := version(t, c); after != v {
		t.Fatalf("refused changes moved the version %d -> %d", v, after)
	}
	if got := must(c.Rule(ctx, "acme", "api"))(t); len(got.Plans) != 1 {
		t.Fatalf("the refused replace changed the rule: %+v", got)
	}

	c.SetTenantCaps(sluice.TenantCaps{Overrides: 3})
	must(c.PutOverride(ctx, sluice.Override{Tenant: "acme", Rule: "web", Name: "third", Subjects: []string{"z"}, Limits: forever.Limits}))(t)
	_, err = c.PutOverride(ctx, sluice.Override{Tenant: "acme", Rule: "web", Name: "fourth", Subjects: []string{"w"}, Limits: forever.Limits})
	wantErr(t, "override past the cap", err, sluice.ErrTenantCap)
	must(c.PutOverride(ctx, forever))(t) // replacing is never refused

	if err := c.DeleteOverride(ctx, "acme", "api", "vips"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Override(ctx, "acme", "api", "vips")
	wantErr(t, "Override after delete", err, sluice.ErrNotFound)
	wantErr(t, "DeleteOverride again", c.DeleteOverride(ctx, "acme", "api", "vips"), sluice.ErrNotFound)

	if err := c.DeleteRule(ctx, "acme", "api"); err != nil {
		t.Fatal(err)
	}
	must(c.PutRule(ctx, r))(t)
	if list := must(c.Overrides(ctx, "acme", "api"))(t); len(list) != 0 {
		t.Fatalf("a rule created again has the deleted rule's overrides: %+v", list)
	}
	_, err = c.Overrides(ctx, "acme", "nope")
	wantErr(t, "Overrides of a missing rule", err, sluice.ErrNotFound)
}

func assertOverride(t *testing.T, got, want sluice.Override) {
	t.Helper()
	if got.Tenant != want.Tenant || got.Rule != want.Rule || got.Name != want.Name || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		!got.UpdatedAt.Equal(want.UpdatedAt) || !slices.Equal(got.Subjects, want.Subjects) || !slices.Equal(got.Limits, want.Limits) {
		t.Fatalf("override = %+v\nwant %+v", got, want)
	}
}
