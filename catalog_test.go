package sluice

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func isInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

func TestValidateTenantName(t *testing.T) {
	for _, name := range []string{"acme", "a", "0", "acme-corp-2", strings.Repeat("a", 63)} {
		if err := TenantName(name).Validate(); err != nil {
			t.Errorf("TenantName(%q).Validate() = %v", name, err)
		}
	}
	for _, name := range []string{"", "Acme", "-acme", "acme_corp", "acme corp", "acme/x", strings.Repeat("a", 64), "ünï"} {
		if err := TenantName(name).Validate(); !isInvalid(err) {
			t.Errorf("TenantName(%q).Validate() = %v; want ErrInvalid", name, err)
		}
	}
}

func TestNewAPIKeySecret(t *testing.T) {
	s1, h1 := NewAPIKeySecret()
	s2, _ := NewAPIKeySecret()
	if s1 == s2 {
		t.Fatal("two secrets are equal")
	}
	if !strings.HasPrefix(s1, APIKeyPrefix) || len(s1) < len(APIKeyPrefix)+43 {
		t.Fatalf("secret %q lacks the prefix or 256 bits", s1)
	}
	if !bytes.Equal(h1, HashAPIKey(s1)) || len(h1) != 32 {
		t.Fatal("hash is not the SHA-256 of the secret")
	}
	id := NewAPIKeyID()
	if !strings.HasPrefix(id, "key_") || len(id) != 16 || id == NewAPIKeyID() {
		t.Fatalf("key ID %q is malformed or repeats", id)
	}
}

func validRule() Rule {
	return Rule{Tenant: "acme", Name: "payments", Route: "/api/payments*", Limits: []Limit{TokenBucket(10, 2)}}
}

func TestRuleValidate(t *testing.T) {
	if err := validRule().Validate(); err != nil {
		t.Fatalf("valid rule: %v", err)
	}
	tests := map[string]func(*Rule){
		"bad_tenant":        func(r *Rule) { r.Tenant = "Acme" },
		"bad_name":          func(r *Rule) { r.Name = "" },
		"bad_route":         func(r *Rule) { r.Route = "/a*b" },
		"no_limits":         func(r *Rule) { r.Limits = nil },
		"invalid_limit":     func(r *Rule) { r.Limits = []Limit{TokenBucket(0, 1)} },
		"duplicate_limits":  func(r *Rule) { r.Limits = []Limit{TokenBucket(1, 1), TokenBucket(2, 1)} },
		"bad_failure_mode":  func(r *Rule) { r.FailureMode = "sometimes" },
		"zero_window_limit": func(r *Rule) { r.Limits = []Limit{SlidingWindow(10, 0)} },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			r := validRule()
			mutate(&r)
			if err := r.Validate(); !isInvalid(err) {
				t.Fatalf("Validate() = %v; want ErrInvalid", err)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	secret, hash := NewAPIKeySecret()
	other, _ := NewAPIKeySecret()
	now := time.Now()
	s := NewSnapshot(7,
		[]Tenant{{Name: "acme", Status: TenantActive, CreatedAt: now}},
		[]SnapshotKey{{Hash: hash, KeyGrant: KeyGrant{Tenant: "acme", KeyID: "key_a", Role: RoleCheck}}},
		[]Rule{validRule(), {Tenant: "ghost", Name: "x", Route: "*", Limits: []Limit{PerSecond(1)}}},
		nil)
	if g, ok := s.Key(secret); !ok || g.KeyID != "key_a" || g.Tenant != "acme" {
		t.Fatalf("Key(secret) = %+v, %v", g, ok)
	}
	if _, ok := s.Key(other); ok {
		t.Fatal("unknown secret found")
	}
	if r, ok := s.Match("acme", "/api/payments/1"); !ok || r.Name != "payments" {
		t.Fatalf("Match = %+v, %v", r, ok)
	}
	if _, ok := s.Match("ghost", "/x"); ok {
		t.Fatal("rule of an unknown tenant kept")
	}
	if r, ok := s.Rule("acme", "payments"); !ok || r.Route != "/api/payments*" {
		t.Fatalf("Rule = %+v, %v", r, ok)
	}
	if _, ok := s.Rule("acme", "nope"); ok {
		t.Fatal("missing rule found")
	}
	allocs := testing.AllocsPerRun(100, func() { s.Key(secret); s.Match("acme", "/api/payments/1") })
	if allocs != 0 {
		t.Fatalf("Key+Match allocated %v times", allocs)
	}
}
