package envoyrls

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// FuzzParseDomain loads arbitrary YAML and, when it loads, matches arbitrary
// descriptors against it. Checked: no panic; every rule's limit is valid and
// its window is exactly unit × unit_multiplier; a match follows entries whose
// keys (and values, for exact entries) are the request's own.
// descriptor is "key=value" entries separated by '|'.
func FuzzParseDomain(f *testing.F) {
	files, _ := filepath.Glob("testdata/readme/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "key_value=x|user=admin")
		f.Add(data, "path=/foo/bar")
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: \"b\\0c\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "a\x00b=c")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 4294967295, requests_per_unit: 5}\n"), "k=v")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 153722867, requests_per_unit: 0}\n"), "k=v")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: v*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 4294967295, algorithm: token_bucket, burst: 1}\n"), "k=vvv")
	f.Add([]byte("domain: &a d\nall_or_nothing: *a\n"), "")
	f.Add([]byte(""), "")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: p\n    value: /api/*/x*y\n    descriptors:\n      - key: u\n        rate_limit: {unit: hour, requests_per_unit: 3}\n    metadata: {a: y}\n    quota_mode: true\n"), "p=/api/1/xzy|u=7")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, unit: day}\n"), "k=v")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 200000000, requests_per_unit: 0}\n"), "k=v")
	f.Fuzz(func(t *testing.T, data []byte, descriptor string) {
		d, err := ParseDomain("f.yaml", data)
		if err != nil {
			if d != nil {
				t.Fatalf("a domain with the error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "f.yaml: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkRules(t, d.root)
		var entries []*ratelimitv3.RateLimitDescriptor_Entry
		for _, e := range strings.Split(descriptor, "|") {
			k, v, _ := strings.Cut(e, "=")
			entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		m, ok := d.Match(entries)
		want := naiveWalk(d.root, entries)
		if ok != (want != nil) || (ok && m.Rule != want) {
			t.Fatalf("Match(%q) = %+v, %v; a naive walk gives %+v", descriptor, m.Rule, ok, want)
		}
	})
}

// naiveWalk follows the entries through the tree by looking at every child:
// an exact key and value, else the first wildcard in file order, else the
// key alone.
func naiveWalk(root *node, entries []*ratelimitv3.RateLimitDescriptor_Entry) *Rule {
	cur := root
	for _, e := range entries {
		var next *node
		for _, c := range cur.exact {
			if c.key == e.Key && c.value == e.Value {
				next = c
			}
		}
		for _, c := range cur.wildcard {
			if next == nil && c.key == e.Key && naiveGlob(c.value, e.Value) {
				next = c
			}
		}
		for _, c := range cur.keyOnly {
			if next == nil && c.key == e.Key {
				next = c
			}
		}
		if next == nil {
			return nil
		}
		cur = next
	}
	if cur == root {
		return nil
	}
	return cur.rule
}

// naiveGlob matches value against a pattern whose '*'s match any run of
// characters, through a regular expression.
func naiveGlob(pattern, value string) bool {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^(?s:" + strings.Join(parts, ".*") + ")$").MatchString(value)
}

func checkRules(t *testing.T, n *node) {
	t.Helper()
	if r := n.rule; r != nil && !r.Unlimited {
		secs, ok := unitSeconds[strings.ToLower(r.Limit.Name[len("per_"):])]
		if !ok {
			t.Fatalf("rule %s: limit name %q names no unit", r.Path, r.Limit.Name)
		}
		window := time.Duration(secs) * time.Second
		if r.Limit.Window != 0 && (r.Limit.Window/window != time.Duration(r.UnitMultiplier) || r.Limit.Window%window != 0) {
			t.Fatalf("rule %s: window %v is not %d × %v", r.Path, r.Limit.Window, r.UnitMultiplier, window)
		}
		if r.RequestsPerUnit == 0 {
			if r.Limit.Window <= 0 {
				t.Fatalf("rule %s: requests_per_unit 0 with window %v", r.Path, r.Limit.Window)
			}
		} else if err := r.Limit.Validate(); err != nil {
			t.Fatalf("rule %s loaded with an invalid limit: %v", r.Path, err)
		}
	}
	for _, c := range n.exact {
		checkRules(t, c)
	}
	for _, c := range n.wildcard {
		checkRules(t, c)
	}
	for _, c := range n.keyOnly {
		checkRules(t, c)
	}
}
