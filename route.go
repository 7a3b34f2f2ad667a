package sluice

import (
	"slices"
	"strings"
)

// RouteTable finds the rule of one tenant that applies to a route. It is
// immutable and safe for concurrent use; Match does not allocate.
//
// Exact patterns sit in a map. Prefix patterns sit in a second map keyed by
// the prefix, with the distinct prefix lengths kept longest first, so the
// longest matching prefix is found with one map lookup per distinct length,
// however many rules there are.
type RouteTable struct {
	rules      []Rule // sorted by name
	exact      map[string]int
	prefixes   map[string]int
	prefixLens []int // distinct prefix lengths, longest first
	wildcard   int   // index of the "*" rule, or -1
}

// NewRouteTable builds the table of rules (one tenant's). Rules with invalid
// patterns are skipped; when two rules share a pattern, which catalogs
// forbid, the first by name wins.
func NewRouteTable(rules []Rule) *RouteTable {
	t := &RouteTable{
		rules:    slices.Clone(rules),
		exact:    make(map[string]int),
		prefixes: make(map[string]int),
		wildcard: -1,
	}
	slices.SortFunc(t.rules, func(a, b Rule) int { return strings.Compare(a.Name, b.Name) })
	for i, r := range t.rules {
		if RoutePattern(r.Route).Validate() != nil {
			continue
		}
		switch {
		case r.Route == "*":
			if t.wildcard < 0 {
				t.wildcard = i
			}
		case strings.HasSuffix(r.Route, "*"):
			prefix := strings.TrimSuffix(r.Route, "*")
			if _, dup := t.prefixes[prefix]; !dup {
				t.prefixes[prefix] = i
				if !slices.Contains(t.prefixLens, len(prefix)) {
					t.prefixLens = append(t.prefixLens, len(prefix))
				}
			}
		default:
			if _, dup := t.exact[r.Route]; !dup {
				t.exact[r.Route] = i
			}
		}
	}
	slices.SortFunc(t.prefixLens, func(a, b int) int { return b - a })
	return t
}

// Match returns the rule for route: an exact pattern wins over the longest
// matching prefix pattern, which wins over "*". A nil table matches nothing.
func (t *RouteTable) Match(route string) (Rule, bool) {
	if t == nil {
		return Rule{}, false
	}
	if i, ok := t.exact[route]; ok {
		return t.rules[i], true
	}
	for _, n := range t.prefixLens {
		if n > len(route) {
			continue
		}
		if i, ok := t.prefixes[route[:n]]; ok {
			return t.rules[i], true
		}
	}
	if t.wildcard >= 0 {
		return t.rules[t.wildcard], true
	}
	return Rule{}, false
}

// Rules returns the table's rules by name. The slice is shared: do not
// modify it.
func (t *RouteTable) Rules() []Rule {
	if t == nil {
		return nil
	}
	return t.rules
}
