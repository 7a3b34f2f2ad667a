package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/internal/testenv"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Setenv("GW_SHORT_SECRET", "short")
	const route = "routes: [{name: api, path_prefix: /api, upstream: 'http://127.0.0.1:9'}]\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown_field", "listen: ':1'\nlisten_addr: x\n" + route, "field listen_addr not found"},
		{"no_routes", "listen: ':1'\n", "routes: at least one route"},
		{"empty_file", "", "routes: at least one route is required; the file is empty"},
		{"only_comments", "# nothing yet\n", "routes: at least one route is required; the file is empty"},
		{"bad_upstream", "routes: [{name: api, path_prefix: /api, upstream: 'localhost:9'}]", "routes[0] (api).upstream"},
		{"relative_prefix", "routes: [{name: api, path_prefix: api, upstream: 'http://h'}]", "routes[0] (api).path_prefix"},
		{"duplicate_names", "routes: [{name: a, path_prefix: /a, upstream: 'http://h'}, {name: a, path_prefix: /b, upstream: 'http://h'}]", "routes[1] (a).name"},
		{"duplicate_prefix", "routes: [{name: a, path_prefix: /a, upstream: 'http://h'}, {name: b, path_prefix: /a, upstream: 'http://h'}]", "routes[1] (b).path_prefix"},
		{"unclean_prefix", "routes: [{name: a, path_prefix: /a/../b, upstream: 'http://h'}]", `routes[0] (a).path_prefix: "/a/../b" is not a clean path`},
		{"prefix_with_double_slash", "routes: [{name: a, path_prefix: //a, upstream: 'http://h'}]", `write "/a"`},
		{"prefix_with_encoded_slash", "routes: [{name: a, path_prefix: /a%2fb, upstream: 'http://h'}]", "routes[0] (a).path_prefix"},
		{"upstream_base_with_dotdot", "routes: [{name: a, path_prefix: /a, upstream: 'http://h/v1/../admin'}]", "routes[0] (a).upstream: the base path"},
		{"upstream_base_with_encoded_dotdot", "routes: [{name: a, path_prefix: /a, upstream: 'http://h/v1/%2e%2e/admin'}]", "routes[0] (a).upstream: the base path"},
		{"access_log_sample_over_one", "access_log: {enabled: true, sample: 1.5}\n" + route, "access_log.sample: must be between 0 and 1"},
		{"access_log_sample_negative", "access_log: {enabled: true, sample: -0.1}\n" + route, "access_log.sample: must be between 0 and 1"},
		{"negative_read_timeout", "server: {read_timeout: -1s}\n" + route, "server.read_timeout: must not be negative"},
		{"header_timeout_over_read_timeout", "server: {read_header_timeout: 2m, read_timeout: 1m}\n" + route, "server.read_header_timeout"},
		{"tiny_max_header_bytes", "server: {max_header_bytes: 100}\n" + route, "server.max_header_bytes"},
		{"huge_max_header_bytes", "server: {max_header_bytes: 10485760}\n" + route, "server.max_header_bytes"},
		{"route_timeout_not_under_write_timeout", "server: {write_timeout: 30s}\n" + route, "routes[0] (api).timeout: 30s is not shorter than server.write_timeout"},
		{"route_timeout_over_default_write_timeout", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', timeout: 5m}]", "routes[0] (a).timeout"},
		{"negative_max_token_bytes", "jwt: {main: {jwks_url: 'http://h/jwks', max_token_bytes: -1}}\n" + route, "jwt.main.max_token_bytes"},
		{"unknown_auth", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', auth: nope}]", "routes[0] (a).auth"},
		{"bad_limit", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, algorithm: fixed_window, limit: 0, window: 1m}]}]", "routes[0] (a).limits"},
		{"limit_mixed_fields", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, algorithm: token_bucket, limit: 5, window: 1m}]}]", "routes[0] (a).limits[0]"},
		{"cost_never_fits", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', cost: 9, limits: [{name: m, algorithm: fixed_window, limit: 5, window: 1m}]}]", "routes[0] (a).cost"},
		{"bad_window", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, algorithm: fixed_window, limit: 5, window: soon}]}]", "not a duration"},
		{"bad_failure_mode", "failure_mode: maybe\n" + route, "failure_mode"},
		{"cors_star_with_credentials", "cors: {allowed_origins: ['*'], allow_credentials: true}\n" + route, "cors.allowed_origins"},
		{"cors_not_an_origin", "cors: {allowed_origins: ['app.example.com']}\n" + route, "cors.allowed_origins[0]"},
		{"cors_wildcard_for_every_site", "cors: {allowed_origins: ['https://*'], allow_credentials: true}\n" + route, "cors.allowed_origins[0]"},
		{"cors_wildcard_for_a_tld", "cors: {allowed_origins: ['https://*.com'], allow_credentials: true}\n" + route, "cors.allowed_origins[0]"},
		{"cors_wildcard_inside", "cors: {allowed_origins: ['https://app*.example.com']}\n" + route, "cors.allowed_origins[0]"},
		{"cors_origin_with_query", "cors: {allowed_origins: ['https://app.example.com?x=1']}\n" + route, "cors.allowed_origins[0]"},
		{"cors_empty", "cors: {allow_credentials: true}\n" + route, "cors.allowed_origins"},
		{"jwt_without_key", "jwt: {main: {issuer: x}}\n" + route, "jwt.main.hs256_secret_env"},
		{"jwt_short_secret", "jwt: {main: {hs256_secret_env: GW_SHORT_SECRET}}\n" + route, "jwt.main.hs256_secret_env"},
		{"jwt_missing_pem", "jwt: {main: {public_keys: [/nonexistent.pem]}}\n" + route, "jwt.main.public_keys[0]"},
		{"jwt_unknown_algorithm", "jwt: {main: {jwks_url: 'http://h/jwks', algorithms: [none]}}\n" + route, "jwt.main.algorithms[0]"},
		{"jwt_huge_leeway", "jwt: {main: {jwks_url: 'http://h/jwks', leeway: 1h}}\n" + route, "jwt.main.leeway"},
		{"bad_trusted_cidr", "trusted_proxies: {cidrs: [10.0.0.0/99]}\n" + route, "trusted_proxies: cidrs"},
		{"bad_trusted_header", "trusted_proxies: {header: X-Real-IP}\n" + route, "trusted_proxies"},
		{"bad_redis", "redis: 'http://h'\n" + route, "redis:"},
		{"admin_listen_not_an_address", "admin_listen: nine\n" + route, "admin_listen"},
		{"admin_listen_is_listen", "listen: '127.0.0.1:8081'\nadmin_listen: '127.0.0.1:8081'\n" + route, "admin_listen: 127.0.0.1:8081 is the public listen address too"},
		{"key_claim_and_header", "jwt: {main: {jwks_url: 'http://h/jwks'}}\nroutes: [{name: a, path_prefix: /a, upstream: 'http://h', auth: main, key: {claim: tid, header: X-API-Key}}]", "routes[0] (a).key: set claim or header, not both"},
		{"key_empty", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', key: {}}]", "routes[0] (a).key: set claim"},
		{"key_claim_without_auth", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', key: {claim: tid}}]", "routes[0] (a).key.claim"},
		{"key_header_not_a_name", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', key: {header: 'X API'}}]", "routes[0] (a).key.header"},
		{"claim_headers_without_auth", "routes: [{name: a, path_prefix: /a, upstream: 'http://h', claim_headers: {sub: X-User}}]", "routes[0] (a).claim_headers: claims come from a verified token"},
		{"claim_header_reserved", "jwt: {main: {jwks_url: 'http://h/jwks'}}\nroutes: [{name: a, path_prefix: /a, upstream: 'http://h', auth: main, claim_headers: {sub: authorization}}]", "routes[0] (a).claim_headers.sub: Authorization"},
		{"claim_header_twice", "jwt: {main: {jwks_url: 'http://h/jwks'}}\nroutes: [{name: a, path_prefix: /a, upstream: 'http://h', auth: main, claim_headers: {sub: X-User, uid: x-user}}]", "already carries claim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestConfigPrivateKeyFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key.pem")
	os.WriteFile(path, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
	_, err := gateway.ParseConfig([]byte(fmt.Sprintf("jwt: {main: {public_keys: [%s]}}\nroutes: [{name: a, path_prefix: /a, upstream: 'http://h', auth: main}]", path)))
	if err == nil || !strings.Contains(err.Error(), "never a private key") {
		t.Fatalf("err = %v", err)
	}
}

func TestReload(t *testing.T) {
	one, two := newUpstream(t, "one"), newUpstream(t, "two")
	cfg := func(up *upstream, extra string) *gateway.Config {
		c, err := gateway.ParseConfig([]byte(fmt.Sprintf("%sroutes: [{name: api, path_prefix: /api, upstream: %q}]", extra, up.URL)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	gw, srv := startGateway(t, fmt.Sprintf("routes: [{name: api, path_prefix: /api, upstream: %q}]", one.URL))
	if r := do(t, "GET", srv.URL+"/api", nil); r.echo.Upstream != "one" {
		t.Fatalf("before reload: %+v", r)
	}
	if err := gw.Reload(cfg(two, "redis: 'redis://127.0.0.1:1/0'\n")); err == nil || !strings.Contains(err.Error(), "redis") {
		t.Fatalf("changing the store on reload: err = %v, want a refusal", err)
	}
	if r := do(t, "GET", srv.URL+"/api", nil); r.echo.Upstream != "one" {
		t.Fatalf("a refused reload changed the routes: %+v", r)
	}
	if err := gw.Reload(cfg(two, "")); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", srv.URL+"/api", nil); r.echo.Upstream != "two" {
		t.Fatalf("after reload: %+v", r)
	}
}

// TestReloadRefusesANewRedisPrefix: the store is opened once, so a reload
// that changed the prefix would report success while the counters stayed
// under the old one.
func TestReloadRefusesANewRedisPrefix(t *testing.T) {
	redis := testenv.Redis(t)
	up := newUpstream(t, "app")
	config := func(prefix string) string {
		return fmt.Sprintf("redis: %s\nredis_prefix: %q\nroutes: [{name: api, path_prefix: /api, upstream: %q}]", redis.URL(), prefix, up.URL)
	}
	gw, _ := startGateway(t, config("one:"))
	cfg, err := gateway.ParseConfig([]byte(config("two:")))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Reload(cfg); err == nil || !strings.Contains(err.Error(), "redis_prefix") {
		t.Fatalf("changing redis_prefix on reload: err = %v, want a refusal naming redis_prefix", err)
	}
	same, err := gateway.ParseConfig([]byte(config("one:")))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Reload(same); err != nil {
		t.Fatalf("reload with the same prefix: %v", err)
	}
}

func TestLoadConfigNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	os.WriteFile(path, []byte("routes: []\n"), 0o600)
	_, err := gateway.LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "routes") {
		t.Fatalf("err = %v", err)
	}
}

// TestConfigWindowsTakeDaysAndWeeks: a limit's window is read like the
// API's and the CLI's, days and weeks included.
func TestConfigWindowsTakeDaysAndWeeks(t *testing.T) {
	cfg, err := gateway.ParseConfig([]byte("routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [" +
		"{name: daily, algorithm: fixed_window, limit: 5, window: 1d}, {name: weekly, algorithm: sliding_window, limit: 20, window: 1w2d}]}]"))
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{time.Duration(cfg.Routes[0].Limits[0].Window), time.Duration(cfg.Routes[0].Limits[1].Window)}
	if want := []time.Duration{24 * time.Hour, 9 * 24 * time.Hour}; !slices.Equal(got, want) {
		t.Errorf("windows %v, want %v", got, want)
	}
	if _, err := gateway.ParseConfig([]byte("routes: [{name: a, path_prefix: /a, upstream: 'http://h', limits: [{name: m, algorithm: fixed_window, limit: 5, window: 0d}]}]")); err == nil || !strings.Contains(err.Error(), "not a positive duration") {
		t.Errorf("a zero window: %v", err)
	}
}
