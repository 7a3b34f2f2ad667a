package envoyrls_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/envoyrls"
)

func TestLoadDirReadmeExamples(t *testing.T) {
	cfg, err := envoyrls.LoadDir("testdata/readme")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bkthomps", "database", "edge_proxy_per_ip", "example4", "internal", "messaging", "mongo_cps", "rl"}
	if got := strings.Join(cfg.Domains(), ","); got != strings.Join(want, ",") {
		t.Fatalf("domains = %s, want %s", got, strings.Join(want, ","))
	}
}

func TestMatch(t *testing.T) {
	cfg, err := envoyrls.LoadDir("testdata/readme")
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.Domain("database")
	tests := []struct {
		name     string
		entries  []string
		wantPath string // "" = no rule
	}{
		{"key_only", []string{"key_value", "k1"}, "key_value"},
		{"nested_exact_beats_key_only", []string{"key_value", "k1", "user", "admin"}, "key_value.user=admin"},
		{"nested_key_only_default", []string{"key_value", "k1", "user", "bob"}, "key_value.user"},
		{"more_entries_than_the_tree_has", []string{"key_value", "k1", "user", "bob", "extra", "x"}, ""},
		{"exact_beats_wildcard", []string{"path", "/foo/bar"}, "path=/foo/bar"},
		{"wildcard_beats_key_only", []string{"path", "/foo/baz"}, "path=/foo*"},
		{"wildcard_matches_empty_rest", []string{"path", "/foo"}, "path=/foo*"},
		{"key_only_when_no_value_matches", []string{"path", "/other"}, "path"},
		{"unknown_key", []string{"nothing", "x"}, ""},
		{"wildcard_needs_the_same_key", []string{"pat", "h/foo"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := db.Match(desc(tt.entries...).Entries)
			if tt.wantPath == "" {
				if ok {
					t.Fatalf("matched %s, want no rule", m.Rule.Path)
				}
				return
			}
			if !ok || m.Rule.Path != tt.wantPath {
				t.Fatalf("matched %v (ok=%v), want %s", m.Rule, ok, tt.wantPath)
			}
		})
	}
}

func TestMatchSubjects(t *testing.T) {
	cfg, err := envoyrls.LoadDir("testdata/readme")
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.Domain("database")
	subject := func(kv ...string) string {
		m, ok := db.Match(desc(kv...).Entries)
		if !ok {
			t.Fatalf("%v matched no rule", kv)
		}
		return m.Subject
	}
	if subject("path", "/foo/a") == subject("path", "/foo/b") {
		t.Error("two values of a wildcard share a counter")
	}
	if subject("path", "/shared/a") != subject("path", "/shared/b") {
		t.Error("share_threshold wildcard values have separate counters")
	}
	if subject("key_value", "a", "user", "x") == subject("key_value", "a", "user", "y") {
		t.Error("two values of a key-only descriptor share a counter")
	}
	if subject("key_value", "ab", "user", "c") == subject("key_value", "a", "user", "bc") {
		t.Error("subjects of different values collide")
	}
	if subject("path", "/foo/bar") != "" {
		t.Error("an exact match has a per-value subject")
	}
}

func TestRuleLimits(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want sluice.Limit
	}{
		{"default_is_fixed_window_of_the_unit", "unit: minute\n      requests_per_unit: 10", sluice.FixedWindow(10, time.Minute).Named("per_minute")},
		{"month_is_30_days", "unit: month\n      requests_per_unit: 10", sluice.FixedWindow(10, 30*24*time.Hour).Named("per_month")},
		{"year_is_365_days", "unit: year\n      requests_per_unit: 10", sluice.FixedWindow(10, 365*24*time.Hour).Named("per_year")},
		{"week", "unit: week\n      requests_per_unit: 10", sluice.FixedWindow(10, 7*24*time.Hour).Named("per_week")},
		{"unit_multiplier", "unit: second\n      unit_multiplier: 30\n      requests_per_unit: 10", sluice.FixedWindow(10, 30*time.Second).Named("per_second")},
		{"sliding_window", "unit: hour\n      requests_per_unit: 100\n      algorithm: sliding_window", sluice.SlidingWindow(100, time.Hour).Named("per_hour")},
		{"token_bucket_default_burst", "unit: second\n      requests_per_unit: 5\n      algorithm: token_bucket", sluice.TokenBucket(5, 5).Named("per_second")},
		{"token_bucket_burst", "unit: minute\n      requests_per_unit: 60\n      algorithm: token_bucket\n      burst: 20", sluice.TokenBucket(20, 1).Named("per_minute")},
		{"lease_auto", "unit: second\n      requests_per_unit: 1000\n      lease: auto", leasedLimit(sluice.FixedWindow(1000, time.Second).Named("per_second"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      " + tt.yaml + "\n"
			d, err := envoyrls.ParseDomain("d.yaml", []byte(data))
			if err != nil {
				t.Fatal(err)
			}
			m, ok := d.Match(desc("k", "v").Entries)
			if !ok {
				t.Fatal("no rule")
			}
			if m.Rule.Limit != tt.want {
				t.Fatalf("limit = %v, want %v", m.Rule.Limit, tt.want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"empty_file", "", "empty"},
		{"no_domain", "descriptors: []", "domain is missing"},
		{"unknown_field", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}", "rate_limt"},
		{"missing_key", "domain: d\ndescriptors:\n  - value: v", "has no key"},
		{"unknown_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", "fortnight"},
		{"missing_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}", "needs a unit"},
		{"unlimited_with_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}", "unlimited"},
		{"duplicate_descriptor", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v", "defined twice"},
		{"duplicate_nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n      - key: k", "a.k is defined twice"},
		{"bad_algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}", "leaky"},
		{"burst_without_token_bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}", "burst"},
		{"lease_not_auto", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, lease: always}", `lease must be "auto"`},
		{"bad_failure_mode", "domain: d\nfailure_mode: maybe\ndescriptors: []", "maybe"},
		{"share_threshold_not_wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true", "share_threshold"},
		{"negative_requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}", "line 4"},
		{"replaces_itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}", "replaces itself"},
		{"empty_replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}", "no name"},
		{"not_yaml", "domain: [", "d.yaml"},
		// 200000000 minutes overflowed time.Duration into a negative window.
		{"window_beyond_a_duration", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 200000000, requests_per_unit: 0}", "unit_multiplier 200000000 makes the window too long"},
		{"year_window_beyond_a_duration", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 293, requests_per_unit: 5}", "more than 292 years"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoyrls.ParseDomain("d.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

// Keys and values may hold any byte: key "a\x00b" with value "c" is not
// key "a" with value "b\x00c", as it was when both were joined with a NUL.
func TestMatchKeysWithNUL(t *testing.T) {
	d, err := envoyrls.ParseDomain("d.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    value: \"b\\0c\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: \"a\\0b\"\n    value: c\n    rate_limit: {unit: second, requests_per_unit: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := d.Match(desc("a\x00b", "c").Entries); !ok || m.Rule.RequestsPerUnit != 2 {
		t.Fatalf("key a\\0b = c matched %+v, %v; want the rule of 2", m.Rule, ok)
	}
	if m, ok := d.Match(desc("a\x00b", "x").Entries); ok {
		t.Fatalf("key a\\0b = x matched %+v", m.Rule)
	}
}

func TestLoadDirDuplicateDomain(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", "domain: same\ndescriptors: []\n")
	write(t, dir, "b.yml", "domain: same\ndescriptors: []\n")
	write(t, dir, "notes.txt", "not a config")
	write(t, dir, ".hidden.yaml", "garbage: [")
	_, err := envoyrls.LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "already defined in") {
		t.Fatalf("err = %v, want a duplicate domain error", err)
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	// Write then rename, as config management tools do, so a reader never
	// sees half a file. The file is written beside the directory, not in
	// it: every file in it is read, dotfiles too.
	tmp, err := os.CreateTemp(filepath.Dir(dir), "write-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// A mapping key written twice is accepted, the last one winning, as
// envoyproxy/ratelimit (YAML v2) does, and each repetition is reported with
// its file and lines.
func TestRepeatedMappingKeyLastWinsWithAWarning(t *testing.T) {
	d, err := envoyrls.ParseDomain("d.yaml", []byte(`domain: d
descriptors:
  - key: k
    rate_limit:
      requests_per_unit: 1
      unit: minute
      requests_per_unit: 7
`))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := d.Match(desc("k", "v").Entries)
	if !ok || m.Rule.RequestsPerUnit != 7 {
		t.Fatalf("matched %+v, %v; want the last requests_per_unit, 7", m.Rule, ok)
	}
	want := `d.yaml:5: key "requests_per_unit" is written again at line 7; the last one wins`
	if len(d.Warnings) != 1 || !strings.HasPrefix(d.Warnings[0], want) {
		t.Fatalf("warnings %q, want one starting %q", d.Warnings, want)
	}
	cfg, err := envoyrls.NewConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings()) != 1 {
		t.Fatalf("the configuration's warnings %q, want the domain's", cfg.Warnings())
	}
}

// An invalid file names its line, so the start-up error (which stops sluice
// serve) points at it.
func TestConfigErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown_field", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n", "line 4: field rate_limt is not one of the descriptor's fields"},
		{"unknown_rate_limit_field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_minute: 1\n", "line 6: field requests_per_minute is not one of the rate_limit's fields"},
		{"bad_unit", "domain: d\ndescriptors:\n  - key: a\n  - key: k\n    rate_limit: {unit: fortnight}\n", "line 4: descriptor k: rate_limit unit"},
		{"nested_missing_key", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - value: v\n", "line 5: a descriptor under a has no key"},
		{"wrong_type", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: many}\n", "line 4"},
		{"unlimited_with_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "line 3: descriptor k: an unlimited rate_limit must not also set unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoyrls.ParseDomain("d.yaml", []byte(tt.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), "d.yaml: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming d.yaml and %q", err, tt.want)
			}
		})
	}
}

func TestGlobMatch(t *testing.T) {
	d, err := envoyrls.ParseDomain("d.yaml", []byte(`domain: d
descriptors:
  - key: k
    value: "a*b*c"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "*.pdf"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: "x**y"
    rate_limit: {unit: second, requests_per_unit: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]uint32{
		"abc": 1, "a-b-c": 1, "abbc": 1, "ab": 0, "abcb": 0, "ac": 0, "abc.pdf": 2,
		"report.pdf": 2, ".pdf": 2, "pdf": 0, "xy": 3, "x--y": 3, "yx": 0,
	} {
		m, ok := d.Match(desc("k", value).Entries)
		if got := uint32(0); ok {
			got = m.Rule.RequestsPerUnit
			if got != want {
				t.Errorf("%q matched the rule of %d, want %d", value, got, want)
			}
		} else if want != 0 {
			t.Errorf("%q matched nothing, want the rule of %d", value, want)
		}
	}
}

// Discovery as envoyproxy/ratelimit's goruntime: every file under the
// directory, recursively, whatever its name, dotfiles unless ignored.
func TestLoadDiscovery(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{
		"a/b/limits.conf":   "domain: nested\ndescriptors: []\n",
		"plain":             "domain: plain\ndescriptors: []\n",
		".dotted.yaml":      "domain: dotted\ndescriptors: []\n",
		".dotdir/in.yaml":   "domain: in_dotdir\ndescriptors: []\n",
		"top.yml":           "domain: top\ndescriptors: []\n",
		"z/deeper/x/y.yaml": "domain: deep\ndescriptors: []\n",
	})
	all, err := envoyrls.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(all.Domains(), ","); got != "deep,dotted,in_dotdir,nested,plain,top" {
		t.Fatalf("domains %s", got)
	}
	some, err := envoyrls.Load(dir, envoyrls.LoadOptions{IgnoreDotfiles: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(some.Domains(), ","); got != "deep,nested,plain,top" {
		t.Fatalf("domains without dotfiles %s", got)
	}
	write(t, dir, "README.md", "# limits\n")
	if _, err := envoyrls.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "README.md") {
		t.Fatalf("a file that is not a configuration: %v, want an error naming it", err)
	}
}

// Kubernetes mounts a ConfigMap as links to a dot directory that holds the
// files: each file is loaded once, without a warning, dotfiles or not.
func TestLoadConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2031_01_01_00_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, data, "api.yaml", "domain: api\ndescriptors: []\n")
	for _, link := range [][2]string{{filepath.Base(data), "..data"}, {"..data/api.yaml", "api.yaml"}} {
		if err := os.Symlink(link[0], filepath.Join(dir, link[1])); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	for _, ignore := range []bool{false, true} {
		cfg, err := envoyrls.Load(dir, envoyrls.LoadOptions{IgnoreDotfiles: ignore})
		if err != nil {
			t.Fatalf("ignore dotfiles %v: %v", ignore, err)
		}
		if got := strings.Join(cfg.Domains(), ","); got != "api" {
			t.Fatalf("ignore dotfiles %v: domains %s", ignore, got)
		}
		if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], "elsewhere: skipped: a symbolic link to a directory") {
			t.Fatalf("ignore dotfiles %v: warnings %q, want one for the link out of the tree", ignore, w)
		}
	}
}

func TestMergeDomains(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write(t, dir, "b.yaml", "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	if _, err := envoyrls.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "--envoy-merge-domains") {
		t.Fatalf("without merging: %v, want an error pointing at --envoy-merge-domains", err)
	}
	cfg, err := envoyrls.Load(dir, envoyrls.LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint32{"a": 1, "b": 2} {
		if m, ok := cfg.Domain("shared").Match(desc(key, "v").Entries); !ok || m.Rule.RequestsPerUnit != want {
			t.Errorf("key %s: %+v, %v; want the rule of %d", key, m.Rule, ok, want)
		}
	}
	write(t, dir, "c.yaml", "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	if _, err := envoyrls.Load(dir, envoyrls.LoadOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "a is defined twice") {
		t.Fatalf("a descriptor in two merged files: %v, want an error naming c.yaml and the descriptor", err)
	}
	write(t, dir, "c.yaml", "domain: shared\nall_or_nothing: true\ndescriptors: []\n")
	if _, err := envoyrls.Load(dir, envoyrls.LoadOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "must agree") {
		t.Fatalf("merged files that disagree on all_or_nothing: %v", err)
	}
}

// Anchors, aliases and merge keys are YAML, and checked like the rest.
func TestConfigAnchorsAndMergeKeys(t *testing.T) {
	d, err := envoyrls.ParseDomain("d.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: &hourly {unit: hour, requests_per_unit: 4}
  - key: b
    rate_limit:
      <<: *hourly
      requests_per_unit: 9
`))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint32{"a": 4, "b": 9} {
		if m, ok := d.Match(desc(key, "v").Entries); !ok || m.Rule.RequestsPerUnit != want || m.Rule.Limit.Window != time.Hour {
			t.Errorf("key %s: %+v, %v; want %d per hour", key, m.Rule, ok, want)
		}
	}
	_, err = envoyrls.ParseDomain("d.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: &bad {unit: hour, requests_per_hour: 4}
  - key: b
    rate_limit:
      <<: *bad
`))
	if err == nil || !strings.Contains(err.Error(), "requests_per_hour") {
		t.Fatalf("a misspelt field behind an alias: %v", err)
	}
}

// Metadata is any mapping, read as envoyproxy/ratelimit reads it: dates stay
// text, keys are taken as written.
func TestMetadata(t *testing.T) {
	d, err := envoyrls.ParseDomain("d.yaml", []byte(`domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {at: 2001-12-14, n: 1.5, 7: seven, list: [1, a, {x: z}], nested: {deep: {deeper: true}}, nothing: null}
  - key: none
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata:
`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := d.Match(desc("k", "v").Entries)
	got, err := protojson.Marshal(m.Rule.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"7":"seven","at":"2001-12-14","list":[1,"a",{"x":"z"}],"n":1.5,"nested":{"deep":{"deeper":true}},"nothing":null}`
	if strings.Join(strings.Fields(string(got)), "") != want {
		t.Errorf("metadata %s, want %s", got, want)
	}
	if m, _ := d.Match(desc("none", "v").Entries); m.Rule.Metadata != nil {
		t.Errorf("empty metadata %v, want none", m.Rule.Metadata)
	}
	if _, err := envoyrls.ParseDomain("d.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: [a, b]\n")); err == nil || !strings.Contains(err.Error(), "metadata: it must be a mapping of names to values (line 5)") {
		t.Errorf("a list as metadata: %v", err)
	}
}

// TestStructuralCharactersNeverShareCounters: a rule's path names its
// counters, so descriptors that differ only in where a '.', '=', '*' or
// '%' sits (a key "a.b" and a key "a" with a nested "b", say) must get
// different paths, or they would share counters.
func TestStructuralCharactersNeverShareCounters(t *testing.T) {
	d, err := envoyrls.ParseDomain("d.yaml", []byte(`domain: d
descriptors:
  - key: a.b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: a=b
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: "b.c"
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: k
    value: b
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: "a%2Eb"
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: w
    value: "x*y"
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: "w=x*y"
    rate_limit: {unit: second, requests_per_unit: 8}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entries []string
		rate    uint32
		path    string
	}{
		{[]string{"a.b", ""}, 1, "a%2Eb"},
		{[]string{"a", "", "b", ""}, 2, "a.b"},
		{[]string{"a=b", ""}, 3, "a%3Db"},
		{[]string{"k", "b.c"}, 4, "k=b%2Ec"},
		{[]string{"k", "b", "c", ""}, 5, "k=b.c"},
		{[]string{"a%2Eb", ""}, 6, "a%252Eb"},
		{[]string{"w", "xzy"}, 7, "w=x*y"},
		{[]string{"w=x*y", ""}, 8, "w%3Dx%2Ay"},
	} {
		m, ok := d.Match(desc(c.entries...).Entries)
		if !ok || m.Rule.RequestsPerUnit != c.rate || m.Rule.Path != c.path {
			t.Errorf("%q matched %+v (ok %v); want the rule of %d at path %q", c.entries, m.Rule, ok, c.rate, c.path)
		}
	}
}

func leasedLimit(l sluice.Limit) sluice.Limit {
	l.Lease = sluice.LeaseAuto
	return l
}
