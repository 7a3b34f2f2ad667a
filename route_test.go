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
		if err := RoutePattern(p).Validate(); err != nil {
			t.Errorf("RoutePattern(%q).Validate() = %v; want nil", p, err)
		}
	}
	// Each message says what is wrong and how a valid pattern looks.
	invalid := map[string]struct{ pattern, says string }{
		"empty":                {"", "route is required: an exact path like /api/orders, a prefix like /api/orders*, or *"},
		"no_leading_slash":     {"api/orders", `route "api/orders" must start with '/' (or be * to match every route)`},
		"star_in_middle":       {"/api/*/orders", `route "/api/*/orders" may hold '*' only at its end, as a prefix match`},
		"two_stars":            {"/api**", "may hold '*' only at its end"},
		"star_prefix":          {"*/api", "must start with '/'"},
		"space":                {"/api orders", `route "/api orders" must not contain spaces or control characters`},
		"tab":                  {"/api\torders", "must not contain spaces or control characters"},
		"newline":              {"/api\n", "must not contain spaces or control characters"},
		"del":                  {"/api\x7f", "must not contain spaces or control characters"},
		"too_long":             {"/" + strings.Repeat("a", MaxRouteBytes), "route is 1025 bytes long; at most 1024 are allowed"},
		"10KB":                 {"/" + strings.Repeat("a", 10<<10), "route is 10241 bytes long; at most 1024 are allowed"},
		"invalid_utf8":         {"/api\xff", "is not valid UTF-8"},
		"c1_control_character": {"/api\u0085", "must not contain spaces or control characters"},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			err := RoutePattern(tt.pattern).Validate()
			if err == nil || !isInvalid(err) {
				t.Fatalf("RoutePattern(%q).Validate() = %v; want an ErrInvalid", tt.pattern, err)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("RoutePattern(%q).Validate() says %q; want it to say %q", tt.pattern, err, tt.says)
			}
		})
	}
}
