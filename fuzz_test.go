package sluice

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzRouteTable checks RoutePattern.Validate against what its comment
// promises, and RouteTable.Match against a naive reference: an exact pattern,
// else the longest matching prefix pattern, else "*"; the first rule by name
// wins a shared pattern. patterns holds one pattern per line.
func FuzzRouteTable(f *testing.F) {
	f.Add("/api/orders\n/api/orders*\n/api*\n*", "/api/orders/17")
	f.Add("/api/orders\n/api/orders*", "/api/orders")
	f.Add("/a*\n/a*\n/ab", "/abc")
	f.Add("*\n*", "")
	f.Add("/*\n/x", "x")
	f.Add("/a b\n/a*b\n/\x7f\n/\u2028", "/a")
	f.Add("/é*\n/\xc3", "/é")
	f.Add("api*\n/"+strings.Repeat("a", MaxRouteBytes), "/"+strings.Repeat("a", MaxRouteBytes))
	f.Fuzz(func(t *testing.T, patterns, route string) {
		lines := strings.Split(patterns, "\n")
		if len(lines) > 64 {
			lines = lines[:64]
		}
		rules := make([]Rule, len(lines))
		for i, p := range lines {
			checkPatternPromises(t, p)
			// Zero-padded, so sorting by name keeps the lines' order.
			rules[i] = Rule{Name: fmt.Sprintf("r%03d", i), Route: p}
		}
		got, gotOK := NewRouteTable(rules).Match(route)
		want, wantOK := naiveMatch(rules, route)
		if gotOK != wantOK || got.Name != want.Name {
			t.Fatalf("Match(%q) over %q = %q, %v; the reference gives %q, %v", route, lines, got.Name, gotOK, want.Name, wantOK)
		}
	})
}

func checkPatternPromises(t *testing.T, p string) {
	t.Helper()
	if RoutePattern(p).Validate() != nil {
		return
	}
	if p == "*" {
		return
	}
	switch {
	case p == "" || p[0] != '/':
		t.Fatalf("accepted %q, which does not start with '/'", p)
	case len(p) > MaxRouteBytes:
		t.Fatalf("accepted a %d-byte pattern", len(p))
	case !utf8.ValidString(p):
		t.Fatalf("accepted invalid UTF-8 %q", p)
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		t.Fatalf("accepted %q with a '*' before its end", p)
	}
	for _, c := range p {
		if c <= ' ' || c == 0x7f {
			t.Fatalf("accepted %q with a space or control character", p)
		}
	}
}

// naiveMatch scans every rule, in name order, for the best one.
func naiveMatch(rules []Rule, route string) (Rule, bool) {
	best, bestLen, found := Rule{}, -1, false
	var wildcard *Rule
	for i := range rules {
		r := rules[i]
		if RoutePattern(r.Route).Validate() != nil {
			continue
		}
		switch {
		case r.Route == "*":
			if wildcard == nil {
				wildcard = &rules[i]
			}
		case strings.HasSuffix(r.Route, "*"):
			prefix := strings.TrimSuffix(r.Route, "*")
			if strings.HasPrefix(route, prefix) && len(prefix) > bestLen && bestLen != math.MaxInt {
				best, bestLen, found = r, len(prefix), true
			}
		default:
			if r.Route == route && bestLen != math.MaxInt {
				best, bestLen, found = r, math.MaxInt, true
			}
		}
	}
	if found {
		return best, true
	}
	if wildcard != nil {
		return *wildcard, true
	}
	return Rule{}, false
}

// FuzzLimitValidate checks that every limit Validate accepts stays within
// what the stores compute exactly: a token bucket's refill rate is a positive
// fraction whose scaled bucket (capacity × interval) fits in 2^52, and a
// sliding window's limit × window (in ms) stays below 2^50.
func FuzzLimitValidate(f *testing.F) {
	f.Add(uint8(0), int64(10), 2.5, int64(0))
	f.Add(uint8(0), int64(1e12), 1e-3, int64(0))
	f.Add(uint8(0), int64(1), 1e-12, int64(0))
	f.Add(uint8(0), int64(1e12), 1e12, int64(0))
	f.Add(uint8(0), int64(7), 1.0/3, int64(0))
	f.Add(uint8(0), int64(999_999_999_999), 0.1234567890123, int64(0))
	f.Add(uint8(0), int64(3), math.SmallestNonzeroFloat64, int64(0))
	f.Add(uint8(0), int64(3), math.NaN(), int64(0))
	f.Add(uint8(1), int64(600), 0.0, int64(time.Minute))
	f.Add(uint8(1), int64(1<<20), 0.0, int64(1<<30)*int64(time.Millisecond))
	f.Add(uint8(1), int64(1<<48), 0.0, int64(4*time.Millisecond))
	f.Add(uint8(2), int64(1<<50), 0.0, int64(time.Hour))
	f.Add(uint8(2), int64(5), 0.0, int64(1500*time.Microsecond))
	f.Add(uint8(1), int64(5), 0.0, int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, alg uint8, capacity int64, refill float64, window int64) {
		algs := []Algorithm{AlgorithmTokenBucket, AlgorithmSlidingWindow, AlgorithmFixedWindow, "", "leaky"}
		l := Limit{Name: "l", Algorithm: algs[int(alg)%len(algs)], Capacity: capacity, RefillPerSecond: refill, Window: time.Duration(window)}
		if err := l.Validate(); err != nil {
			if !strings.Contains(err.Error(), `"l"`) {
				t.Fatalf("%v rejected without naming the limit: %v", l, err)
			}
			return
		}
		switch l.Algorithm {
		case AlgorithmTokenBucket:
			tokens, interval := l.RefillRate()
			if tokens <= 0 || interval <= 0 {
				t.Fatalf("%v accepted, but RefillRate = %d/%dms", l, tokens, interval)
			}
			scaled := new(big.Int).Mul(big.NewInt(l.Capacity), big.NewInt(interval))
			if scaled.Cmp(big.NewInt(maxExact)) > 0 {
				t.Fatalf("%v: capacity × interval = %v exceeds 2^52 (RefillRate %d/%dms)", l, scaled, tokens, interval)
			}
			if tokens >= maxExact {
				t.Fatalf("%v: %d tokens per interval is not exact in a double", l, tokens)
			}
		case AlgorithmSlidingWindow, AlgorithmFixedWindow:
			if l.Capacity <= 0 || l.Window < time.Millisecond || l.Window%time.Millisecond != 0 {
				t.Fatalf("%v accepted with a non-positive limit or a window that is not whole milliseconds", l)
			}
			if l.Algorithm == AlgorithmSlidingWindow {
				prod := new(big.Int).Mul(big.NewInt(l.Capacity), big.NewInt(l.Window.Milliseconds()))
				if prod.Cmp(big.NewInt(1<<50)) >= 0 {
					t.Fatalf("%v accepted, but limit × window = %v ms is not below 2^50", l, prod)
				}
			}
		default:
			t.Fatalf("%v accepted with algorithm %q", l, l.Algorithm)
		}
	})
}
