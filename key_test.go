package sluice_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
)

func TestKeysShareOneHashTag(t *testing.T) {
	req := sluice.Request{Tenant: "acme", Rule: "pay", Subject: "{evil}:x", Limits: []sluice.Limit{
		sluice.PerSecond(1).Named("a"), sluice.PerMinute(1).Named("b"), sluice.FixedWindow(1, time.Hour).Named("c"),
	}}
	keys := sluice.Keys("sluice:", req)
	tag := func(k string) string { return k[strings.IndexByte(k, '{'):strings.IndexByte(k, '}')] }
	for _, k := range keys {
		if !strings.HasPrefix(k, "sluice:{") || tag(k) != tag(keys[0]) {
			t.Fatalf("key %q does not share the hash tag of %q", k, keys[0])
		}
		if strings.Contains(k, "evil") {
			t.Fatalf("key %q carries the raw subject", k)
		}
	}
	long := req
	long.Subject = strings.Repeat("x", 10<<10)
	if k := sluice.Keys("sluice:", long)[0]; len(k) > 80 {
		t.Fatalf("a 10 KB subject makes a %d-byte key", len(k))
	}
}

func TestKeysAreUnambiguous(t *testing.T) {
	l := []sluice.Limit{sluice.PerSecond(1)}
	seen := map[string]string{}
	for _, parts := range [][3]string{
		{"a", "b", "c"}, {"ab", "", "c"}, {"a", "bc", ""}, {"", "ab", "c"}, {"a", "b", "c\x00"}, {"a\x00", "b", "c"},
	} {
		k := sluice.Keys("", sluice.Request{Tenant: parts[0], Rule: parts[1], Subject: parts[2], Limits: l})[0]
		if prev, ok := seen[k]; ok {
			t.Fatalf("%q and %q share key %q", prev, parts, k)
		}
		seen[k] = strings.Join(parts[:], "|")
	}
}

func TestKeyChangesWithAlgorithmAndWindowButNotCapacity(t *testing.T) {
	key := func(l sluice.Limit) string {
		return sluice.Keys("", sluice.Request{Subject: "s", Limits: []sluice.Limit{l.Named("x")}})[0]
	}
	if key(sluice.PerMinute(10)) != key(sluice.PerMinute(20)) {
		t.Error("raising a capacity must keep the counter")
	}
	if key(sluice.SlidingWindow(10, time.Minute)) == key(sluice.SlidingWindow(10, time.Hour)) {
		t.Error("a new window must start a new counter")
	}
	if key(sluice.SlidingWindow(10, time.Minute)) == key(sluice.FixedWindow(10, time.Minute)) {
		t.Error("a new algorithm must start a new counter")
	}
}
