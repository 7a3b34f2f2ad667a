package sluice_test

import (
	"slices"
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

// TestKeysKeepTheirBytes pins the key format: a change here strands every
// counter in every store.
func TestKeysKeepTheirBytes(t *testing.T) {
	limits := []sluice.Limit{
		sluice.TokenBucket(10, 1).Named("burst"),
		sluice.SlidingWindow(5, time.Minute).Named("m"),
		sluice.FixedWindow(5, 1500*time.Millisecond).Named("f"),
	}
	for _, c := range []struct {
		prefix, tenant, rule, subject string
		want                          []string
	}{
		{"sluice:", "acme", "pay", "user-1", []string{
			"sluice:{8WstXkjIDkSLDzlOcpe7hA}:burst:tb", "sluice:{8WstXkjIDkSLDzlOcpe7hA}:m:sw60000", "sluice:{8WstXkjIDkSLDzlOcpe7hA}:f:fw1500"}},
		{"", "", "", "", []string{
			"{nZCOz7ayVt74tJp8UE5siA}:burst:tb", "{nZCOz7ayVt74tJp8UE5siA}:m:sw60000", "{nZCOz7ayVt74tJp8UE5siA}:f:fw1500"}},
		// Past AppendSubjectTag's stack buffer.
		{"p:", "t", "{}:", strings.Repeat("s", 70_000), []string{
			"p:{yHPBU_nvlqA-3_vxUgCl3g}:burst:tb", "p:{yHPBU_nvlqA-3_vxUgCl3g}:m:sw60000", "p:{yHPBU_nvlqA-3_vxUgCl3g}:f:fw1500"}},
	} {
		req := sluice.Request{Tenant: c.tenant, Rule: c.rule, Subject: c.subject, Limits: limits}
		if got := sluice.Keys(c.prefix, req); !slices.Equal(got, c.want) {
			t.Errorf("Keys(%q, %d-byte subject) = %q, want %q", c.prefix, len(c.subject), got, c.want)
		}
		tag := sluice.SubjectTag(c.tenant, c.rule, c.subject)
		if len(tag) != sluice.SubjectTagLen {
			t.Errorf("tag %q is not SubjectTagLen long", tag)
		}
		for i, l := range limits {
			if got := sluice.LimitKey(c.prefix, tag, l); got != c.want[i] {
				t.Errorf("LimitKey = %q, want %q", got, c.want[i])
			}
			// Appending after other bytes, with the tag in dst, as package
			// memory does.
			b := sluice.AppendSubjectTag([]byte("x"), c.tenant, c.rule, c.subject)
			b = sluice.AppendLimitKey(b, c.prefix, b[1:], l)
			if got := string(b[1+len(tag):]); got != c.want[i] {
				t.Errorf("AppendLimitKey = %q, want %q", got, c.want[i])
			}
		}
	}
}
