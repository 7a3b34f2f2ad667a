package envoyrls_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// The compatibility suite: envoyproxy/ratelimit's documented configuration
// format and README examples, written as our own cases, each a
// configuration, the service's settings, and requests with their expected
// answers field by field, asked over a real gRPC listener.
//
// With SLUICE_COMPARE_RATELIMIT set to an envoyproxy/ratelimit binary, the
// same cases are also asked of it (on a private redis-server), so the table
// is checked against the reference too. Its windows follow the wall clock, so
// there duration_until_reset is only checked to lie within the unit.

// compatSettings are the service settings a case runs with, as
// envoyproxy/ratelimit's environment variables and Sluice's options.
type compatSettings struct {
	headers                               bool
	limitHeader, remainingHdr, resetHdr   string
	shadow, dynamicMetadata, mergeDomains bool
	ignoreDotfiles                        bool
}

func (s compatSettings) options() envoyrls.Options {
	return envoyrls.Options{
		ResponseHeaders: s.headers,
		HeaderLimit:     s.limitHeader, HeaderRemaining: s.remainingHdr, HeaderReset: s.resetHdr,
		Shadow: s.shadow, DynamicMetadata: s.dynamicMetadata,
		Load: envoyrls.LoadOptions{MergeDomains: s.mergeDomains, IgnoreDotfiles: s.ignoreDotfiles},
	}
}

func (s compatSettings) env() []string {
	env := []string{
		"LIMIT_RESPONSE_HEADERS_ENABLED=" + strconv.FormatBool(s.headers),
		"SHADOW_MODE=" + strconv.FormatBool(s.shadow),
		"RESPONSE_DYNAMIC_METADATA=" + strconv.FormatBool(s.dynamicMetadata),
		"MERGE_DOMAIN_CONFIG=" + strconv.FormatBool(s.mergeDomains),
		"RUNTIME_IGNOREDOTFILES=" + strconv.FormatBool(s.ignoreDotfiles),
	}
	for name, v := range map[string]string{"LIMIT_LIMIT_HEADER": s.limitHeader, "LIMIT_REMAINING_HEADER": s.remainingHdr, "LIMIT_RESET_HEADER": s.resetHdr} {
		if v != "" {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// wantStatus is a descriptor's expected status. A zero unit means no
// current_limit (no rule, replaced, unlimited).
type wantStatus struct {
	code      rlspb.RateLimitResponse_Code
	rpu       uint32
	unit      rlspb.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

const (
	second = rlspb.RateLimitResponse_RateLimit_SECOND
	minute = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour   = rlspb.RateLimitResponse_RateLimit_HOUR
	day    = rlspb.RateLimitResponse_RateLimit_DAY
)

// noLimit is the status of a descriptor no rule limits.
var noLimit = wantStatus{code: ok}

// unlimited is the status of an unlimited rule's descriptor.
var unlimited = wantStatus{code: ok, remaining: math.MaxUint32}

type compatStep struct {
	descs    []*ratelimitv3.RateLimitDescriptor
	hits     uint32
	overall  rlspb.RateLimitResponse_Code
	statuses []wantStatus
	// headers, if set, are the response headers expected, name to value;
	// a reset header is checked like duration_until_reset.
	headers map[string]string
	// metadata, if set, is the "metadata" field expected in the dynamic
	// metadata, as JSON; "-" means none.
	metadata string
}

type compatCase struct {
	name string
	// files are the configuration files, by path under the directory.
	files    map[string]string
	settings compatSettings
	domain   string
	steps    []compatStep
}

func d(kv ...string) []*ratelimitv3.RateLimitDescriptor {
	return []*ratelimitv3.RateLimitDescriptor{desc(kv...)}
}

func ds(descs ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
	return descs
}

func one(code rlspb.RateLimitResponse_Code, rpu uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, remaining uint32) []wantStatus {
	return []wantStatus{{code, rpu, unit, remaining}}
}

var compatCases = []compatCase{
	{
		name: "readme_example1_exact_values",
		files: map[string]string{"config.yaml": `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`},
		domain: "mongo_cps",
		steps: []compatStep{
			{descs: d("database", "users"), overall: ok, statuses: one(ok, 500, second, 499)},
			{descs: d("database", "other"), overall: ok, statuses: []wantStatus{noLimit}},
		},
	},
	{
		name: "readme_example2_nested_and_multiple_descriptors",
		files: map[string]string{"config.yaml": `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`},
		domain: "messaging",
		steps: []compatStep{
			{descs: ds(desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")), overall: ok,
				statuses: []wantStatus{{ok, 5, day, 4}, {ok, 100, day, 99}}},
			{descs: ds(desc("message_type", "marketing", "to_number", "2062222222"), desc("to_number", "2062222222")), overall: ok,
				statuses: []wantStatus{{ok, 5, day, 4}, {ok, 100, day, 99}}},
			{descs: ds(desc("message_type", "marketing", "to_number", "2061111111")), overall: ok, statuses: one(ok, 5, day, 3)},
		},
	},
	{
		name: "readme_example3_exact_value_wins_blocked_ip",
		files: map[string]string{"config.yaml": `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`},
		domain: "edge_proxy_per_ip",
		steps: []compatStep{
			{descs: d("remote_address", "50.0.0.1"), overall: ok, statuses: one(ok, 10, second, 9)},
			{descs: d("remote_address", "50.0.0.5"), overall: over, statuses: one(over, 0, second, 0)},
		},
	},
	{
		name: "readme_example4_depth_must_match",
		files: map[string]string{"config.yaml": `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`},
		domain: "example4",
		steps: []compatStep{
			{descs: d("key", "value", "subkey", "subvalue"), overall: ok, statuses: []wantStatus{noLimit}},
			{descs: d("key", "value"), overall: ok, statuses: one(ok, 300, second, 299)},
		},
	},
	{
		name: "readme_example5_unlimited",
		files: map[string]string{"config.yaml": `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`},
		domain: "internal",
		steps: []compatStep{
			{descs: d("ldap", "x"), overall: ok, statuses: []wantStatus{unlimited}},
			{descs: d("azure", "x"), overall: ok, statuses: one(ok, 100, minute, 99)},
		},
	},
	{
		name: "readme_example6_shadow_mode",
		files: map[string]string{"config.yaml": `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`},
		domain: "example6",
		steps: []compatStep{
			{descs: d("service", "auth-service", "user", "user-a"), hits: 11, overall: ok, statuses: one(ok, 10, second, 0)},
			{descs: d("service", "auth-service", "user", "user-b"), hits: 21, overall: over, statuses: one(over, 20, second, 0)},
		},
	},
	{
		name: "readme_example7_replaces",
		files: map[string]string{"config.yaml": `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: hour
`},
		domain: "example7",
		steps: []compatStep{
			{descs: ds(desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")), overall: ok,
				statuses: []wantStatus{noLimit, {ok, 10, hour, 9}}},
			// The replaced limit was not touched.
			{descs: d("key_1", "value_1", "user", "bkthomps"), overall: ok, statuses: one(ok, 5, hour, 4)},
		},
	},
	{
		name: "readme_example9_wildcards_anywhere",
		files: map[string]string{"config.yaml": `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: hour
      requests_per_unit: 20
  - key: path
    value: /api/*/action
    rate_limit:
      unit: hour
      requests_per_unit: 20
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: hour
      requests_per_unit: 20
`},
		domain: "example9",
		steps: []compatStep{
			{descs: d("key1", "value1"), overall: ok, statuses: one(ok, 20, hour, 19)},
			{descs: d("key1", "value1"), overall: ok, statuses: one(ok, 20, hour, 18)},
			// Each matched value has its own counter.
			{descs: d("key1", "valueXYZ"), overall: ok, statuses: one(ok, 20, hour, 19)},
			// '*' matches zero characters too.
			{descs: d("key1", "value"), overall: ok, statuses: one(ok, 20, hour, 19)},
			{descs: d("key1", "other"), overall: ok, statuses: []wantStatus{noLimit}},
			{descs: d("path", "/api/123/action"), overall: ok, statuses: one(ok, 20, hour, 19)},
			{descs: d("path", "/api/user-id/action"), overall: ok, statuses: one(ok, 20, hour, 19)},
			{descs: d("path", "/api/123/other"), overall: ok, statuses: []wantStatus{noLimit}},
			{descs: d("route", "/api/v1/resource/123/action"), overall: ok, statuses: one(ok, 20, hour, 19)},
			{descs: d("route", "/api/v1/resource/action"), overall: ok, statuses: []wantStatus{noLimit}},
		},
	},
	{
		name: "readme_example11_share_threshold",
		files: map[string]string{"config.yaml": `
domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: mid
    value: a/*/z
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
`},
		domain: "example11",
		steps: []compatStep{
			{descs: d("files", "files/a.pdf"), hits: 5, overall: ok, statuses: one(ok, 10, hour, 5)},
			{descs: d("files", "files/b.csv"), hits: 5, overall: ok, statuses: one(ok, 10, hour, 0)},
			{descs: d("files", "files/c.txt"), overall: over, statuses: one(over, 10, hour, 0)},
			{descs: d("files_no_share", "files_no_share/a.pdf"), hits: 10, overall: ok, statuses: one(ok, 10, hour, 0)},
			{descs: d("files_no_share", "files_no_share/b.csv"), overall: ok, statuses: one(ok, 10, hour, 9)},
			{descs: d("mid", "a/1/z"), hits: 4, overall: ok, statuses: one(ok, 10, hour, 6)},
			{descs: d("mid", "a/2/z"), overall: ok, statuses: one(ok, 10, hour, 5)},
		},
	},
	{
		name: "shipped_example_quota_mode_and_metadata",
		files: map[string]string{"config.yaml": `
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 2
    metadata:
      service_with_quota:
        name: "service_2"
        tier: 2
  - key: plain
    rate_limit:
      unit: hour
      requests_per_unit: 1
`},
		settings: compatSettings{dynamicMetadata: true},
		domain:   "rl",
		steps: []compatStep{
			{descs: d("service", "service_1"), overall: ok, statuses: one(ok, 1, hour, 0),
				metadata: `{"service_with_quota":{"name":"service_1"}}`},
			// Every quota-mode descriptor over: the request is over.
			{descs: d("service", "service_1"), overall: over, statuses: one(over, 1, hour, 0), metadata: "-"},
			// One of two over: the request passes; the status still says so.
			{descs: ds(desc("service", "service_1"), desc("service", "service_2")), overall: ok,
				statuses: []wantStatus{{over, 1, hour, 0}, {ok, 2, hour, 1}},
				metadata: `{"service_with_quota":{"name":"service_2","tier":2}}`},
			// A plain limit over makes the request over whatever the quotas say.
			{descs: ds(desc("plain", "p"), desc("service", "service_2")), overall: ok,
				statuses: []wantStatus{{ok, 1, hour, 0}, {ok, 2, hour, 0}}, metadata: `{"service_with_quota":{"name":"service_2","tier":2}}`},
			{descs: ds(desc("plain", "p"), desc("service", "service_2")), overall: over,
				statuses: []wantStatus{{over, 1, hour, 0}, {over, 2, hour, 0}}, metadata: "-"},
		},
	},
	{
		name: "metadata_of_passed_rules_merged",
		files: map[string]string{"config.yaml": `
domain: md
descriptors:
  - key: first
    rate_limit: {unit: hour, requests_per_unit: 5}
    metadata: {common: {a: 1}, only1: x, clash: first}
  - key: second
    rate_limit: {unit: hour, requests_per_unit: 5}
    metadata: {common: {a: 2, b: 3}, only2: y, clash: {nested: second}, when: 2031-01-01, quoted: "y"}
  - key: third
    rate_limit: {unit: hour, requests_per_unit: 0}
    metadata: {only3: z}
`},
		settings: compatSettings{dynamicMetadata: true},
		domain:   "md",
		steps: []compatStep{
			{descs: ds(desc("first", "f"), desc("second", "s"), desc("third", "t")), overall: over,
				statuses: []wantStatus{{ok, 5, hour, 4}, {ok, 5, hour, 4}, {over, 0, hour, 0}},
				metadata: `{"clash":"first","common":{"a":1,"b":3},"only1":"x","only2":true,"quoted":"y","when":"2031-01-01"}`},
		},
	},
	{
		name: "unlimited_wins_over_requests_per_unit",
		files: map[string]string{"config.yaml": `
domain: unl
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      requests_per_unit: 5
`},
		domain: "unl",
		steps: []compatStep{
			{descs: d("k", "v"), hits: 6, overall: ok, statuses: []wantStatus{unlimited}},
		},
	},
	{
		name: "missing_requests_per_unit_is_zero",
		files: map[string]string{"config.yaml": `
domain: zero
descriptors:
  - key: k
    rate_limit:
      unit: minute
`},
		domain: "zero",
		steps: []compatStep{
			{descs: d("k", "v"), overall: over, statuses: one(over, 0, minute, 0)},
		},
	},
	{
		name: "repeated_mapping_key_last_wins",
		files: map[string]string{"config.yaml": `
domain: twice
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
      unit: hour
      requests_per_unit: 3
`},
		domain: "twice",
		steps: []compatStep{
			{descs: d("k", "v"), overall: ok, statuses: one(ok, 3, hour, 2)},
		},
	},
	{
		name: "empty_descriptor_is_ok",
		files: map[string]string{"config.yaml": `
domain: empty
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 3
`},
		domain: "empty",
		steps: []compatStep{
			{descs: ds(&ratelimitv3.RateLimitDescriptor{}, desc("k", "v")), overall: ok, statuses: []wantStatus{noLimit, {ok, 3, hour, 2}}},
		},
	},
	{
		name: "response_headers_default_names",
		files: map[string]string{"config.yaml": `
domain: hdr
descriptors:
  - key: a
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: b
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: c
    rate_limit:
      unlimited: true
`},
		settings: compatSettings{headers: true},
		domain:   "hdr",
		steps: []compatStep{
			// The least remaining wins.
			{descs: ds(desc("b", "x"), desc("a", "x"), desc("c", "x")), overall: ok,
				statuses: []wantStatus{{ok, 10, hour, 9}, {ok, 2, hour, 1}, unlimited},
				headers:  map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "3600"}},
			{descs: d("a", "x"), overall: ok, statuses: one(ok, 2, hour, 0),
				headers: map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "3600"}},
			// Over the limit: that descriptor's figures.
			{descs: ds(desc("a", "x"), desc("b", "x")), overall: over,
				statuses: []wantStatus{{over, 2, hour, 0}, {ok, 10, hour, 8}},
				headers:  map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "3600"}},
			// Nothing limited: no headers.
			{descs: d("c", "x"), overall: ok, statuses: []wantStatus{unlimited}, headers: map[string]string{}},
		},
	},
	{
		name: "response_headers_renamed",
		files: map[string]string{"config.yaml": `
domain: hdr2
descriptors:
  - key: a
    rate_limit:
      unit: minute
      requests_per_unit: 5
`},
		settings: compatSettings{headers: true, limitHeader: "X-Limit", remainingHdr: "X-Left", resetHdr: "X-Reset"},
		domain:   "hdr2",
		steps: []compatStep{
			{descs: d("a", "x"), overall: ok, statuses: one(ok, 5, minute, 4),
				headers: map[string]string{"X-Limit": "5", "X-Left": "4", "X-Reset": "60"}},
		},
	},
	{
		name: "global_shadow_mode",
		files: map[string]string{"config.yaml": `
domain: shadowed
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 1
`},
		settings: compatSettings{shadow: true},
		domain:   "shadowed",
		steps: []compatStep{
			{descs: d("k", "v"), overall: ok, statuses: one(ok, 1, hour, 0)},
			// The status still says what would have been denied.
			{descs: d("k", "v"), overall: ok, statuses: one(over, 1, hour, 0)},
		},
	},
	{
		name: "merge_domain_config",
		files: map[string]string{
			"a.yaml": "domain: merged\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
			"b.yaml": "domain: merged\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
		},
		settings: compatSettings{mergeDomains: true},
		domain:   "merged",
		steps: []compatStep{
			{descs: ds(desc("a", "x"), desc("b", "x")), overall: ok, statuses: []wantStatus{{ok, 1, hour, 0}, {ok, 2, hour, 1}}},
		},
	},
	{
		name: "discovery_recursive_any_extension_dotfiles",
		files: map[string]string{
			"team/one/limits.conf": "domain: deep\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 4}\n",
			"no_extension":         "domain: bare\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
			".hidden.yaml":         "domain: dotted\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 6}\n",
		},
		domain: "deep",
		steps: []compatStep{
			{descs: d("k", "v"), overall: ok, statuses: one(ok, 4, hour, 3)},
		},
	},
	{
		name: "discovery_dotfile_is_loaded",
		files: map[string]string{
			".hidden.yaml": "domain: dotted\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 6}\n",
			"other.yaml":   "domain: other\ndescriptors: []\n",
		},
		domain: "dotted",
		steps: []compatStep{
			{descs: d("k", "v"), overall: ok, statuses: one(ok, 6, hour, 5)},
		},
	},
	{
		name: "discovery_ignore_dotfiles",
		files: map[string]string{
			".hidden.yaml": "domain: dotted\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 6}\n",
			".git/config":  "[core]\n",
			"other.yaml":   "domain: other\ndescriptors: []\n",
		},
		settings: compatSettings{ignoreDotfiles: true},
		domain:   "dotted",
		steps: []compatStep{
			{descs: d("k", "v"), overall: ok, statuses: []wantStatus{noLimit}},
		},
	},
}

// writeFiles writes files (slash-separated path to content) under dir, and
// returns dir.
func writeFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEnvoyRatelimitCompatibility(t *testing.T) {
	for _, tc := range compatCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, t.TempDir(), tc.files)
			opts := tc.settings.options()
			srv, clock := memoryServer(t, t.TempDir(), opts)
			cfg, err := envoyrls.Load(dir, opts.Load)
			if err != nil {
				t.Fatal(err)
			}
			srv.SetConfig(cfg)
			// The test clock stands at the start of every unit's window,
			// so each reset is the whole unit.
			runCompatSteps(t, serve(t, srv), tc, func(unit rlspb.RateLimitResponse_RateLimit_Unit) int64 {
				return unitSeconds(unit) - clock.Now().Unix()%unitSeconds(unit)
			})
		})
	}
}

// TestEnvoyRatelimitCompatibilityOnRedis asks the same cases of servers on
// a real Redis, whose clock (TIME) dates the windows: resets are checked to
// lie within the unit.
func TestEnvoyRatelimitCompatibilityOnRedis(t *testing.T) {
	redis := testenv.Redis(t)
	for _, tc := range compatCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := redis.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			opts := tc.settings.options()
			// Answers, not deadlines, are under test: the race detector on
			// two shared cores can hold a call past the usual 50ms.
			opts.Engine = (*observed)(nil).engine(t, openRedis(t, redis.URL()), check.Options{Guard: guard.Options{Timeout: 10 * time.Second}})
			srv := envoyrls.NewServer(opts)
			cfg, err := envoyrls.Load(writeFiles(t, t.TempDir(), tc.files), opts.Load)
			if err != nil {
				t.Fatal(err)
			}
			srv.SetConfig(cfg)
			runCompatSteps(t, serve(t, srv), tc, nil)
		})
	}
}

// TestEnvoyRatelimitCompatibilityReference asks envoyproxy/ratelimit itself
// the same cases, when SLUICE_COMPARE_RATELIMIT names its binary.
func TestEnvoyRatelimitCompatibilityReference(t *testing.T) {
	bin := os.Getenv("SLUICE_COMPARE_RATELIMIT")
	if bin == "" {
		t.Skip("set SLUICE_COMPARE_RATELIMIT to an envoyproxy/ratelimit binary to check the cases against it")
	}
	redis := testenv.Redis(t)
	for _, tc := range compatCases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, filepath.Join(root, "ratelimit", "config"), tc.files)
			grpcPort, httpPort, debugPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(),
				"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr,
				"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
				"GRPC_HOST=127.0.0.1", "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
				fmt.Sprintf("GRPC_PORT=%d", grpcPort), fmt.Sprintf("PORT=%d", httpPort), fmt.Sprintf("DEBUG_PORT=%d", debugPort),
				"CACHE_KEY_PREFIX="+strings.ReplaceAll(t.Name(), "/", "_")+":")
			cmd.Env = append(cmd.Env, tc.settings.env()...)
			var out testenv.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				if t.Failed() {
					t.Logf("envoyproxy/ratelimit's output:\n%s", out.String())
				}
			})
			conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			c := rlspb.NewRateLimitServiceClient(conn)
			// Ready once it answers a domain no file has, which counts
			// nothing.
			deadline := time.Now().Add(30 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "compat-probe", Descriptors: d("probe", "x")})
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("envoyproxy/ratelimit did not answer within 30s: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			runCompatSteps(t, c, tc, nil)
		})
	}
}

// runCompatSteps asks each step and compares the answer field by field.
// reset gives the expected seconds until reset of a unit; nil accepts any
// value within the unit (a wall-clock window).
func runCompatSteps(t *testing.T, c rlspb.RateLimitServiceClient, tc compatCase, reset func(rlspb.RateLimitResponse_RateLimit_Unit) int64) {
	t.Helper()
	checkReset := func(where string, unit rlspb.RateLimitResponse_RateLimit_Unit, got int64) {
		t.Helper()
		if reset != nil {
			if want := reset(unit); got != want {
				t.Errorf("%s: reset %d s, want %d", where, got, want)
			}
		} else if got < 1 || got > unitSeconds(unit) {
			t.Errorf("%s: reset %d s, want within 1..%d", where, got, unitSeconds(unit))
		}
	}
	for i, st := range tc.steps {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: tc.domain, Descriptors: st.descs, HitsAddend: st.hits})
		cancel()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if resp.GetOverallCode() != st.overall {
			t.Errorf("step %d: overall %v, want %v", i, resp.GetOverallCode(), st.overall)
		}
		if len(resp.GetStatuses()) != len(st.statuses) {
			t.Fatalf("step %d: %d statuses, want %d: %v", i, len(resp.GetStatuses()), len(st.statuses), resp)
		}
		for j, want := range st.statuses {
			got := resp.GetStatuses()[j]
			where := fmt.Sprintf("step %d, status %d", i, j)
			if got.GetCode() != want.code || got.GetLimitRemaining() != want.remaining {
				t.Errorf("%s: %v with %d remaining, want %v with %d", where, got.GetCode(), got.GetLimitRemaining(), want.code, want.remaining)
			}
			if want.unit == 0 {
				if got.GetCurrentLimit() != nil || got.GetDurationUntilReset() != nil {
					t.Errorf("%s: limit %v, reset %v; want neither", where, got.GetCurrentLimit(), got.GetDurationUntilReset())
				}
				continue
			}
			if cl := got.GetCurrentLimit(); cl.GetRequestsPerUnit() != want.rpu || cl.GetUnit() != want.unit {
				t.Errorf("%s: limit %v, want %d per %v", where, cl, want.rpu, want.unit)
			}
			if dur := got.GetDurationUntilReset(); dur.GetNanos() != 0 {
				t.Errorf("%s: reset %v is not whole seconds", where, dur.AsDuration())
			} else {
				checkReset(where, want.unit, dur.GetSeconds())
			}
		}
		if st.headers != nil {
			got := map[string]string{}
			for _, h := range resp.GetResponseHeadersToAdd() {
				got[h.GetKey()] = h.GetValue()
			}
			if len(got) != len(st.headers) {
				t.Errorf("step %d: headers %v, want %v", i, got, st.headers)
			}
			for name, want := range st.headers {
				if strings.HasSuffix(strings.ToLower(name), "reset") {
					n, err := strconv.ParseInt(got[name], 10, 64)
					if err != nil {
						t.Errorf("step %d: header %s = %q, want seconds", i, name, got[name])
						continue
					}
					w, _ := strconv.ParseInt(want, 10, 64)
					checkReset(fmt.Sprintf("step %d, header %s", i, name), unitOfSeconds(w), n)
					continue
				}
				if got[name] != want {
					t.Errorf("step %d: header %s = %q, want %q (all: %v)", i, name, got[name], want, got)
				}
			}
		}
		if st.metadata != "" {
			md := resp.GetDynamicMetadata()
			if md.GetFields()["domain"].GetStringValue() != tc.domain || len(md.GetFields()["descriptors"].GetListValue().GetValues()) != len(st.descs) {
				t.Errorf("step %d: dynamic metadata %v lacks the domain or the descriptors", i, md)
			}
			got := "-"
			if m := md.GetFields()["metadata"]; m != nil {
				b, err := m.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
			}
			if !sameJSON(got, st.metadata) {
				t.Errorf("step %d: metadata %s, want %s", i, got, st.metadata)
			}
		}
	}
}

func unitSeconds(u rlspb.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case second:
		return 1
	case minute:
		return 60
	case hour:
		return 3600
	case day:
		return 86400
	}
	panic("unit " + u.String())
}

func unitOfSeconds(s int64) rlspb.RateLimitResponse_RateLimit_Unit {
	for _, u := range []rlspb.RateLimitResponse_RateLimit_Unit{second, minute, hour, day} {
		if unitSeconds(u) == s {
			return u
		}
	}
	panic(fmt.Sprintf("no unit of %d s", s))
}

// sameJSON compares two JSON texts, ignoring spacing.
func sameJSON(a, b string) bool {
	strip := func(s string) string { return strings.Join(strings.Fields(s), "") }
	return strip(a) == strip(b)
}

// duration_until_reset is whole seconds, rounded as envoyproxy/ratelimit
// does (the seconds from the current whole second to the window's end), also
// for what is decided without the store: the time to the window's end, not
// the whole window.
func TestDurationUntilResetWholeSeconds(t *testing.T) {
	dir := configDir(t, `
domain: reset
descriptors:
  - key: counted
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
`)
	srv, clock := memoryServer(t, dir, envoyrls.Options{})
	c := serve(t, srv)
	clock.Advance(20*time.Second + 300*time.Millisecond) // 39.7 s left of the minute
	for _, tt := range []struct {
		name string
		desc *ratelimitv3.RateLimitDescriptor
		code rlspb.RateLimitResponse_Code
		want int64
	}{
		{"counted", desc("counted", "u"), ok, 40},
		{"cost_above_the_limit", withHits(desc("counted", "v"), 3), over, 40},
		{"requests_per_unit_0", desc("blocked", "u"), over, 40},
		{"look_at_requests_per_unit_0", withHits(desc("blocked", "u"), 0), ok, 40},
		// A rolling window has no end: until it is back to full (39.7 s,
		// then the next minute, over which this request still weighs),
		// rounded up.
		{"sliding_window", desc("sliding", "u"), ok, 100},
	} {
		st := call(t, c, "reset", tt.desc).GetStatuses()[0]
		if st.GetCode() != tt.code || st.GetDurationUntilReset().GetSeconds() != tt.want || st.GetDurationUntilReset().GetNanos() != 0 {
			t.Errorf("%s: %v with reset %v, want %v with %ds", tt.name, st.GetCode(), st.GetDurationUntilReset().AsDuration(), tt.code, tt.want)
		}
	}
}

// Reloads read the directory as the server was told to: merged domains,
// files in subdirectories, dotfiles skipped when asked, and warnings logged.
func TestWatchReadsWithTheLoadOptions(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{"a.yaml": "domain: live\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"})
	logs := &testenv.Buffer{}
	srv, _ := memoryServer(t, dir, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Load: envoyrls.LoadOptions{MergeDomains: true, IgnoreDotfiles: true}})
	watch(t, srv, dir)
	writeFiles(t, dir, map[string]string{
		"team/b.conf": "domain: live\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2, unit: day}\n",
		".swap":       "not: [yaml",
	})
	testenv.Eventually(t, 10*time.Second, "the merged file to load", func() bool {
		m, ok := srv.Config().Domain("live").Match(desc("b", "x").Entries)
		return ok && m.Rule.Unit == rlspb.RateLimitResponse_RateLimit_DAY
	})
	if _, ok := srv.Config().Domain("live").Match(desc("a", "x").Entries); !ok {
		t.Fatal("the first file's rule is gone after the merge")
	}
	testenv.Eventually(t, 10*time.Second, "the repeated key to be logged", func() bool {
		return strings.Contains(logs.String(), `b.conf:4: key \"unit\" is written again at line 4`)
	})
}
