package catalogtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// testAudit: every change leaves one entry, made by the context's actor, in
// the admin API's form and without secrets; a failed change leaves none.
func testAudit(t *testing.T, c Catalog, _ Open) {
	op := sluice.WithActor(t.Context(), sluice.ActorOperator)
	start := time.Now().Add(-time.Second)
	must(c.CreateTenant(op, "acme"))(t)
	if _, err := c.CreateTenant(op, "acme"); !errors.Is(err, sluice.ErrConflict) {
		t.Fatalf("second CreateTenant: %v", err)
	}
	_, hash := sluice.NewAPIKeySecret()
	key := must(c.CreateKey(op, "acme", "admin", sluice.RoleAdmin, hash))(t)
	byKey := sluice.WithActor(t.Context(), key.ID)
	must(c.PutRule(byKey, rule("acme", "orders", "/api/orders*")))(t)
	must(c.PutRule(byKey, rule("acme", "orders", "/api/orders*", sluice.PerMinute(600))))(t)
	if err := c.DeleteRule(byKey, "acme", "orders"); err != nil {
		t.Fatal(err)
	}
	must(c.RevokeKey(op, "acme", key.ID))(t)
	must(c.SetTenantStatus(op, "acme", sluice.TenantSuspended))(t)
	if err := c.SetAdminTokenHash(t.Context(), hash); err != nil {
		t.Fatal(err)
	}
	if err := c.RecordReset(op, "acme", "orders", "alice"); err != nil {
		t.Fatal(err)
	}
	// Publishing tells instances; the entry is RecordReset's alone.
	if err := c.PublishReset(op, "acme", "orders", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTenant(op, "acme"); err != nil {
		t.Fatal(err)
	}

	entries := must(c.Audit(t.Context(), sluice.AuditQuery{}))(t)
	want := []struct{ actor, tenant, action, target string }{
		{sluice.ActorOperator, "acme", sluice.AuditTenantDelete, "acme"},
		{sluice.ActorOperator, "acme", sluice.AuditSubjectReset, "orders"},
		{sluice.ActorSystem, "", sluice.AuditAdminTokenSet, "admin_token"},
		{sluice.ActorOperator, "acme", sluice.AuditTenantUpdate, "acme"},
		{sluice.ActorOperator, "acme", sluice.AuditKeyRevoke, key.ID},
		{key.ID, "acme", sluice.AuditRuleDelete, "orders"},
		{key.ID, "acme", sluice.AuditRuleReplace, "orders"},
		{key.ID, "acme", sluice.AuditRuleCreate, "orders"},
		{sluice.ActorOperator, "acme", sluice.AuditKeyCreate, key.ID},
		{sluice.ActorOperator, "acme", sluice.AuditTenantCreate, "acme"},
	}
	if len(entries) != len(want) {
		for _, e := range entries {
			t.Logf("%d %s %s %s %s", e.ID, e.Actor, e.Tenant, e.Action, e.Target)
		}
		t.Fatalf("%d audit entries; want %d (the failed create must leave none)", len(entries), len(want))
	}
	for i, w := range want {
		e := entries[i]
		if e.Actor != w.actor || e.Tenant != w.tenant || e.Action != w.action || e.Target != w.target {
			t.Errorf("entry %d: %s %q %s %q; want %s %q %s %q", i, e.Actor, e.Tenant, e.Action, e.Target, w.actor, w.tenant, w.action, w.target)
		}
		if i > 0 && e.ID >= entries[i-1].ID {
			t.Errorf("entry %d has ID %d, not below the newer %d", i, e.ID, entries[i-1].ID)
		}
		if e.Time.Before(start) || e.Time.After(time.Now().Add(time.Second)) {
			t.Errorf("entry %d at %v, outside the test", i, e.Time)
		}
		for _, doc := range []json.RawMessage{e.Before, e.After} {
			if doc != nil && !json.Valid(doc) {
				t.Errorf("entry %d: invalid JSON %s", i, doc)
			}
			hexHash := []byte(hexString(hash))
			// A field named like a hash, not any "hash" in the text: a
			// random key ID may spell one (key_7tobjhashyzz did).
			if bytes.Contains(bytes.ToLower(doc), hexHash) || hashField.Match(doc) {
				t.Errorf("entry %d holds the key hash: %s", i, doc)
			}
		}
	}
	field := func(doc json.RawMessage, name string) any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		return m[name]
	}
	byAction := func(action string) sluice.AuditEntry {
		i := slices.IndexFunc(entries, func(e sluice.AuditEntry) bool { return e.Action == action })
		return entries[i]
	}
	if e := byAction(sluice.AuditTenantCreate); e.Before != nil || field(e.After, "status") != "active" {
		t.Errorf("tenant.create: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditTenantUpdate); field(e.Before, "status") != "active" || field(e.After, "status") != "suspended" {
		t.Errorf("tenant.update: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditTenantDelete); field(e.Before, "name") != "acme" || e.After != nil {
		t.Errorf("tenant.delete: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditKeyRevoke); field(e.Before, "revoked_at") != nil || field(e.After, "revoked_at") == nil {
		t.Errorf("key.revoke: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditRuleReplace); !bytes.Contains(e.Before, []byte(`"capacity":10`)) || !bytes.Contains(e.After, []byte(`"limit":600,"window":"1m"`)) {
		t.Errorf("rule.replace: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditRuleDelete); field(e.Before, "route") != "/api/orders*" || e.After != nil {
		t.Errorf("rule.delete: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditAdminTokenSet); e.Before != nil || e.After != nil {
		t.Errorf("admin_token.set: before %s, after %s", e.Before, e.After)
	}
	if e := byAction(sluice.AuditSubjectReset); field(e.After, "subject") != "alice" {
		t.Errorf("subject.reset: after %s", e.After)
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// testAuditQueries: filters, paging, and a tenant's view that leaves out a
// deleted namesake's history.
func testAuditQueries(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	op := sluice.WithActor(ctx, sluice.ActorOperator)
	must(c.CreateTenant(op, "acme"))(t)
	must(c.PutRule(op, rule("acme", "old", "/old")))(t)
	if err := c.DeleteTenant(op, "acme"); err != nil {
		t.Fatal(err)
	}
	must(c.CreateTenant(op, "acme"))(t)
	must(c.CreateTenant(op, "beta"))(t)
	for i := range 5 {
		must(c.PutRule(sluice.WithActor(ctx, "key_abc"), rule("acme", "r"+string(rune('0'+i)), "/r"+string(rune('0'+i)))))(t)
	}
	must(c.PutRule(op, rule("beta", "b", "/b")))(t)

	ids := func(q sluice.AuditQuery) []string {
		t.Helper()
		var out []string
		for _, e := range must(c.Audit(ctx, q))(t) {
			out = append(out, e.Tenant+"/"+e.Action+"/"+e.Target)
		}
		return out
	}
	check := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q; want %q", what, got, want)
		}
	}
	check("beta", ids(sluice.AuditQuery{Tenant: "beta"}), []string{"beta/rule.create/b", "beta/tenant.create/beta"})
	check("acme's current generation", ids(sluice.AuditQuery{Tenant: "acme", CurrentTenantOnly: true, Action: sluice.AuditRuleCreate, Limit: 2}),
		[]string{"acme/rule.create/r4", "acme/rule.create/r3"})
	all := ids(sluice.AuditQuery{Tenant: "acme"})
	if len(all) != 9 {
		t.Errorf("acme, every generation: %q; want 9 entries", all)
	}
	current := ids(sluice.AuditQuery{Tenant: "acme", CurrentTenantOnly: true})
	if len(current) != 6 || slices.Contains(current, "acme/rule.create/old") {
		t.Errorf("acme's current generation holds %q; want its 6 entries, none of the deleted namesake", current)
	}
	check("by actor", ids(sluice.AuditQuery{Actor: "key_abc", Limit: 1}), []string{"acme/rule.create/r4"})

	// Paging: each page continues below the last ID of the previous one.
	var paged []string
	q := sluice.AuditQuery{Limit: 3}
	for {
		page := must(c.Audit(ctx, q))(t)
		for _, e := range page {
			paged = append(paged, e.Tenant+"/"+e.Action+"/"+e.Target)
		}
		if len(page) < q.Limit {
			break
		}
		q.Before = page[len(page)-1].ID
	}
	check("paged", paged, ids(sluice.AuditQuery{}))
	if len(paged) != 11 {
		t.Errorf("%d entries in all; want 11", len(paged))
	}

	if got := ids(sluice.AuditQuery{Since: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Errorf("since an hour ahead: %q", got)
	}
	if got := ids(sluice.AuditQuery{Until: time.Now().Add(-time.Hour)}); len(got) != 0 {
		t.Errorf("until an hour ago: %q", got)
	}
	if got := ids(sluice.AuditQuery{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}); len(got) != 11 {
		t.Errorf("within the last hour: %d entries; want 11", len(got))
	}

	for name, bad := range map[string]sluice.AuditQuery{
		"limit over the maximum":    {Limit: sluice.MaxAuditLimit + 1},
		"negative limit":            {Limit: -1},
		"bad tenant name":           {Tenant: "Not A Slug"},
		"current tenant, no tenant": {CurrentTenantOnly: true},
		"until before since":        {Since: time.Now(), Until: time.Now().Add(-time.Minute)},
		"negative cursor":           {Before: -5},
	} {
		_, err := c.Audit(ctx, bad)
		wantErr(t, name, err, sluice.ErrInvalid)
	}
	_, err := c.Audit(ctx, sluice.AuditQuery{Tenant: "gone", CurrentTenantOnly: true})
	wantErr(t, "current generation of a missing tenant", err, sluice.ErrNotFound)
}

// testAuditKeepsEveryLimitField: the audit log records a rule in the admin
// API's form (package adminapi), and reading an entry back gives the limits
// as they were stored, every field of every algorithm (a concurrency
// limit's lease TTL included), before and after a replace.
func testAuditKeepsEveryLimitField(t *testing.T, c Catalog, _ Open) {
	ctx := t.Context()
	must(c.CreateTenant(ctx, "acme"))(t)
	limits := []sluice.Limit{
		sluice.TokenBucket(10, 2.5).Named("burst"),
		sluice.SlidingWindow(600, time.Minute).Named("minute"),
		leased(sluice.FixedWindow(1000, 24*time.Hour).Named("day")),
		sluice.Concurrency(5, 30*time.Second).Named("inflight"),
		sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 5, Mode: sluice.RefillAdd, Max: 50}),
		{Name: "month", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 100, Calendar: sluice.CalendarMonth, TimeZone: "Europe/Berlin"},
	}
	// Every field of a limit is set by one of them, so a field added to
	// sluice.Limit must be added here, and so to the wire form too.
	lt := reflect.TypeFor[sluice.Limit]()
	for i := range lt.NumField() {
		if !slices.ContainsFunc(limits, func(l sluice.Limit) bool { return !reflect.ValueOf(l).Field(i).IsZero() }) {
			t.Fatalf("no limit of the test sets sluice.Limit.%s: add one that does", lt.Field(i).Name)
		}
	}
	first := must(c.PutRule(ctx, sluice.Rule{Tenant: "acme", Name: "api", Route: "/api*", Limits: limits, FailureMode: sluice.FailLocal, Shadow: true}))(t)
	replaced := first
	replaced.Limits = slices.Clone(limits[2:])
	replaced = must(c.PutRule(ctx, replaced))(t)

	entries := must(c.Audit(ctx, sluice.AuditQuery{Tenant: "acme", Action: sluice.AuditRuleReplace}))(t)
	if len(entries) != 1 {
		t.Fatalf("%d rule.replace entries, want 1", len(entries))
	}
	for _, side := range []struct {
		name string
		raw  json.RawMessage
		want sluice.Rule
	}{{"before", entries[0].Before, first}, {"after", entries[0].After, replaced}} {
		var wire adminapi.Rule
		if err := json.Unmarshal(side.raw, &wire); err != nil {
			t.Fatalf("%s: %v in %s", side.name, err, side.raw)
		}
		got, err := wire.ToRule()
		if err != nil {
			t.Fatalf("%s: %v in %s", side.name, err, side.raw)
		}
		if !slices.Equal(got.Limits, side.want.Limits) || got.Route != side.want.Route || got.FailureMode != side.want.FailureMode ||
			got.Shadow != side.want.Shadow || got.Tenant != side.want.Tenant || got.Name != side.want.Name || !got.UpdatedAt.Equal(side.want.UpdatedAt) {
			t.Errorf("%s reads back as %+v\nwant %+v\n(recorded %s)", side.name, got, side.want, side.raw)
		}
	}
}

// testAuditPrune: PruneAudit deletes only entries older than its cutoff,
// oldest first, at most a batch per call, and leaves the rest readable.
func testAuditPrune(t *testing.T, c Catalog, _ Open) {
	op := sluice.WithActor(t.Context(), sluice.ActorOperator)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		must(c.CreateTenant(op, name))(t)
	}
	all := must(c.Audit(t.Context(), sluice.AuditQuery{}))(t)
	if len(all) != 5 {
		t.Fatalf("%d entries, want 5", len(all))
	}
	// Cut after the third-oldest entry: every entry older than the cutoff
	// goes, whatever the clock's resolution put in the same millisecond.
	cutoff := all[2].Time.Add(time.Millisecond)
	var old []int64
	for _, e := range all {
		if e.Time.Before(cutoff) {
			old = append(old, e.ID)
		}
	}
	if _, err := c.PruneAudit(t.Context(), cutoff, 0); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("PruneAudit of batch 0: %v, want ErrInvalid", err)
	}
	if n := must(c.PruneAudit(t.Context(), cutoff, 2))(t); n != min(2, int64(len(old))) {
		t.Fatalf("first batch of 2 pruned %d", n)
	}
	left := must(c.Audit(t.Context(), sluice.AuditQuery{}))(t)
	if len(left) != 5-min(2, len(old)) || left[len(left)-1].ID != all[len(all)-1-min(2, len(old))].ID {
		t.Fatalf("after one batch: %d entries left, oldest %d; want the oldest gone first", len(left), left[len(left)-1].ID)
	}
	for {
		n := must(c.PruneAudit(t.Context(), cutoff, 2))(t)
		if n == 0 {
			break
		}
	}
	left = must(c.Audit(t.Context(), sluice.AuditQuery{}))(t)
	if len(left) != 5-len(old) {
		t.Fatalf("after pruning: %d entries, want %d", len(left), 5-len(old))
	}
	for _, e := range left {
		if e.Time.Before(cutoff) {
			t.Errorf("entry %d of %v outlived the cutoff %v", e.ID, e.Time, cutoff)
		}
	}
}

// testAuditRetention: RunAuditRetention deletes the entries past the
// retention at once, without a call, says so in the log, and returns when
// its context ends.
func testAuditRetention(t *testing.T, c Catalog, _ Open) {
	op := sluice.WithActor(t.Context(), sluice.ActorOperator)
	for _, name := range []string{"a", "b", "c"} {
		must(c.CreateTenant(op, name))(t)
	}
	time.Sleep(2 * time.Millisecond) // older than the retention below
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.RunAuditRetention(ctx, time.Millisecond, slog.New(slog.NewJSONHandler(&logs, nil)))
	}()
	testenv.Eventually(t, 10*time.Second, "the entries past the retention are pruned", func() bool {
		return len(must(c.Audit(t.Context(), sluice.AuditQuery{}))(t)) == 0
	})
	cancel()
	<-done
	if !strings.Contains(logs.String(), `"msg":"audit log pruned"`) || !strings.Contains(logs.String(), `"entries":3`) {
		t.Errorf("log %q does not say 3 entries were pruned", logs.String())
	}
}

// hashField matches a JSON field whose name holds "hash" (key_hash, hash).
var hashField = regexp.MustCompile(`"[A-Za-z_]*hash[A-Za-z_]*"\s*:`)
