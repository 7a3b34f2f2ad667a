package adminapi_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

// A lease TTL is written like any window, days included (a TTL is at most a
// day, so a week is refused by the limit's own validation).
func TestConcurrencyTTLTakesDays(t *testing.T) {
	limit := int64(3)
	for ttl, want := range map[string]time.Duration{"45s": 45 * time.Second, "1d": 24 * time.Hour, "0.5d": 12 * time.Hour} {
		l, err := adminapi.Limit{Name: "inflight", Algorithm: "concurrency", Limit: &limit, TTL: ttl}.ToLimit()
		if err != nil || l.TTL != want {
			t.Errorf("ttl %q: %v, %v; want %v", ttl, l.TTL, err, want)
		}
	}
	for _, ttl := range []string{"soon", "1w"} {
		if _, err := (adminapi.Limit{Name: "inflight", Algorithm: "concurrency", Limit: &limit, TTL: ttl}).ToLimit(); err == nil {
			t.Errorf("ttl %q was accepted", ttl)
		}
	}
}

// TestRuleRoundTrip: a rule spelled for the wire, encoded as JSON and as
// YAML and read back, is the rule it was, every field of every algorithm.
func TestRuleRoundTrip(t *testing.T) {
	rule := sluice.Rule{Tenant: "acme", Name: "api", Route: "/api*", FailureMode: sluice.FailLocal, Shadow: true,
		UpdatedAt: time.UnixMilli(1_700_000_000_123).UTC(), Limits: []sluice.Limit{
			sluice.TokenBucket(10, 2.5).Named("burst"),
			sluice.SlidingWindow(600, time.Minute).Named("minute"),
			sluice.FixedWindow(1000, 7*24*time.Hour).Named("week"),
			sluice.Concurrency(5, 1500*time.Millisecond).Named("inflight"),
		}}
	for _, codec := range []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{{"json", json.Marshal, json.Unmarshal}, {"yaml", yaml.Marshal, yaml.Unmarshal}} {
		raw, err := codec.marshal(adminapi.NewRule(rule))
		if err != nil {
			t.Fatal(err)
		}
		var back adminapi.Rule
		if err := codec.unmarshal(raw, &back); err != nil {
			t.Fatalf("%s: %v", codec.name, err)
		}
		got, err := back.ToRule()
		if err != nil {
			t.Fatalf("%s: %v in %s", codec.name, err, raw)
		}
		if !reflect.DeepEqual(got, rule) {
			t.Errorf("%s: read back as %+v\nwant %+v\n(from %s)", codec.name, got, rule, raw)
		}
	}
}

// The list bodies spell an empty listing as an empty list, and each item as
// its own constructor does.
func TestListBodies(t *testing.T) {
	for name, c := range map[string]struct {
		body any
		want string
	}{
		"no_tenants": {adminapi.NewTenantList(nil), `{"tenants":[]}`},
		"no_keys":    {adminapi.NewKeyList(nil), `{"keys":[]}`},
		"no_rules":   {adminapi.NewRuleList(nil), `{"rules":[]}`},
		"one_tenant": {adminapi.NewTenantList([]sluice.Tenant{{Name: "acme", Status: sluice.TenantActive, CreatedAt: time.Unix(0, 0)}}),
			`{"tenants":[{"name":"acme","status":"active","created_at":"1970-01-01T00:00:00Z"}]}`},
	} {
		b, err := json.Marshal(c.body)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s, %v; want %s", name, b, err, c.want)
		}
	}
	rs := []sluice.Rule{{Name: "api", Route: "*", Limits: []sluice.Limit{sluice.TokenBucket(10, 2)}}}
	if got := adminapi.NewRuleList(rs); !reflect.DeepEqual(got.Rules, []adminapi.Rule{adminapi.NewRule(rs[0])}) {
		t.Errorf("rules: %+v", got)
	}
}
