package sluice

import (
	"strings"
	"testing"
)

func TestRouteTableMatch(t *testing.T) {
	table := NewRouteTable([]Rule{
		{Name: "orders-exact", Route: "/api/orders"},
		{Name: "orders", Route: "/api/orders*"},
		{Name: "orders-items", Route: "/api/orders/items*"},
		{Name: "api", Route: "/api*"},
		{Name: "root", Route: "/*"},
		{Name: "everything", Route: "*"},
	})
	tests := []struct {
		name, route, want string
	}{
		{"exact_beats_prefix", "/api/orders", "orders-exact"},
		{"prefix_matches_below_it", "/api/orders/17", "orders"},
		{"prefix_matches_without_separator", "/api/orders-old", "orders"},
		{"longest_prefix_wins", "/api/orders/items/3", "orders-items"},
		{"shorter_prefix_when_longer_misses", "/api/users", "api"},
		{"slash_prefix", "/health", "root"},
		{"wildcard_catches_rest", "health", "everything"},
		{"wildcard_catches_empty", "", "everything"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := table.Match(tt.route)
			if !ok || r.Name != tt.want {
				t.Fatalf("Match(%q) = %q, %v; want %q", tt.route, r.Name, ok, tt.want)
			}
		})
	}
}

func TestRouteTableNoMatch(t *testing.T) {
	table := NewRouteTable([]Rule{{Name: "a", Route: "/a"}, {Name: "b", Route: "/b/*"}})
	for _, route := range []string{"/", "/a/", "/b", "/c", ""} {
		if r, ok := table.Match(route); ok {
			t.Errorf("Match(%q) = %q; want no match", route, r.Name)
		}
	}
	var empty *RouteTable
	if _, ok := empty.Match("/a"); ok {
		t.Error("nil table matched")
	}
}

func TestRouteTableMatchDoesNotAllocate(t *testing.T) {
	table := NewRouteTable([]Rule{
		{Name: "a", Route: "/api/orders"}, {Name: "b", Route: "/api/orders*"},
		{Name: "c", Route: "/api*"}, {Name: "d", Route: "*"},
	})
	allocs := testing.AllocsPerRun(100, func() {
		table.Match("/api/orders/17")
		table.Match("/api/orders")
		table.Match("/nothing")
	})
	if allocs != 0 {
		t.Fatalf("Match allocated %v times per run", allocs)
	}
}

func TestValidateRoutePattern(t *testing.T) {
	valid := []string{"*", "/", "/*", "/api/orders", "/api/orders*", "/api/ördérs", strings.Repeat("/a", 512)}
	for _, p := range valid {
		if err := ValidateRoutePattern(p); err != nil {
			t.Errorf("ValidateRoutePattern(%q) = %v; want nil", p, err)
		}
	}
	invalid := map[string]string{
		"empty":                "",
		"no_leading_slash":     "api/orders",
		"star_in_middle":       "/api/*/orders",
		"two_stars":            "/api**",
		"star_prefix":          "*/api",
		"space":                "/api orders",
		"tab":                  "/api\torders",
		"newline":              "/api\n",
		"del":                  "/api\x7f",
		"too_long":             "/" + strings.Repeat("a", MaxRouteBytes),
		"invalid_utf8":         "/api\xff",
		"c1_control_character": "/api\u0085",
	}
	for name, p := range invalid {
		t.Run(name, func(t *testing.T) {
			err := ValidateRoutePattern(p)
			if err == nil || !isInvalid(err) {
				t.Fatalf("ValidateRoutePattern(%q) = %v; want an ErrInvalid", p, err)
			}
		})
	}
}
