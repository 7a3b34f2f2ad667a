package gateway_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/gateway"
)

// fieldNamed matches an error that says where the problem is: a field of
// gateway.yaml (as "routes[1] (a).limits[0]: ..." or "cors.max_age: ...") or,
// for YAML that does not decode, the line.
var fieldNamed = regexp.MustCompile(`(^|[ .])(listen|redis|redis_prefix|failure_mode|store_timeout|server|read_header_timeout|read_timeout|write_timeout|idle_timeout|max_header_bytes|max_token_bytes|trusted_proxies|cidrs|hops|header|cors|allowed_origins|allowed_methods|allowed_headers|exposed_headers|allow_credentials|max_age|jwt|issuer|audience|leeway|hs256_secret_env|public_keys|jwks_url|jwks_refresh|algorithms|routes|name|path_prefix|methods|upstream|strip_prefix|timeout|auth|auth_optional|limits|cost|algorithm|capacity|refill_per_second|limit|window)(\[\d+\])?( \([^)]*\))?[.:]|line \d+`)

// FuzzParseConfig parses arbitrary gateway.yaml contents: no panic, and
// every rejection names the field (or line) at fault, but for YAML syntax
// errors.
func FuzzParseConfig(f *testing.F) {
	f.Setenv("GW_FUZZ_SECRET", strings.Repeat("s", 32))
	if data, err := os.ReadFile("../examples/gateway/gateway.yaml"); err == nil {
		f.Add(string(data))
	}
	const route = "routes: [{name: api, path_prefix: /api, upstream: 'http://127.0.0.1:9'}]\n"
	for _, s := range []string{
		"",
		"---\n",
		"null",
		"# only a comment\n",
		route,
		route + "---\nlisten: x\n",
		"jwt: {main: {hs256_secret_env: GW_FUZZ_SECRET, leeway: 10m}}\n" + route,
		"jwt: {main: {hs256_secret_env: GW_FUZZ_SECRET, algorithms: [none]}}\n" + route,
		"jwt: {main: {jwks_url: 'ftp://x'}}\n" + route,
		"jwt: {'': {hs256_secret_env: GW_FUZZ_SECRET}}\n" + route,
		"trusted_proxies: {cidrs: ['10.0.0.0/33'], hops: -1, header: Forwarded}\n" + route,
		"cors: {allowed_origins: ['https://*.example.com'], max_age: -1s}\n" + route,
		"store_timeout: 1x\n" + route,
		"server: {read_header_timeout: 2m, read_timeout: 1m, write_timeout: -1s, max_header_bytes: 10}\n" + route,
		"server: {write_timeout: 5s}\nroutes: [{name: a, path_prefix: /a/../b, upstream: 'http://h/x/%2e%2e', timeout: 10s}]",
		"jwt: {main: {hs256_secret_env: GW_FUZZ_SECRET, max_token_bytes: -1}}\n" + route,
		"redis: 'redis://[::1'\n" + route,
		"routes: [{name: a, path_prefix: /a, upstream: 'http://h', methods: [get, 'P T'], timeout: -1s}]",
		"routes: [{name: a, path_prefix: /a, upstream: 'http://h', cost: 1, limits: [{name: m, algorithm: token_bucket, capacity: 5, refill_per_second: .nan}]}]",
		"routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, algorithm: sliding_window, limit: 1125899906842624, window: 1ms}]}]",
		"routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, limit: 5, window: 1m}]}]",
		"routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, algorithm: fixed_window, limit: 5, window: [1m]}]}]",
		"routes: [{name: a, path_prefix: /a, upstream: 'http://h', cost: x}]",
		"routes: {name: a}",
		"routes: [&r {name: a, path_prefix: /a, upstream: 'http://h'}, *r]",
		"listen: [\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if strings.Contains(data, "/dev/") || strings.Contains(data, "/proc/") {
			t.Skip("public_keys would read a device or process file")
		}
		cfg, err := gateway.ParseConfig([]byte(data))
		if err != nil {
			if cfg != nil {
				t.Fatalf("a config with the error %v", err)
			}
			// A syntax error is about the file, not a field, and the parser
			// does not always know the line ("unexpected end of stream").
			syntax := strings.HasPrefix(err.Error(), "invalid YAML: yaml: ") && !strings.Contains(err.Error(), "unmarshal errors")
			if !syntax && !fieldNamed.MatchString(err.Error()) {
				t.Fatalf("the error names no field or line: %v\n--- input:\n%s", err, data)
			}
			return
		}
		if len(cfg.Routes) == 0 {
			t.Fatal("a config without routes was accepted")
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config that Validate rejects: %v", err)
		}
	})
}
