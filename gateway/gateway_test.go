package gateway_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/middleware"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

func TestGatewayJWT(t *testing.T) {
	keys(t)
	t.Setenv("GW_TEST_SECRET", hsSecret)
	jwks := newJWKSServer(t)
	jwks.set(rsaJWK("rsa-1", &rsaOther.PublicKey), edJWK("ed-1", edPub), ecJWK("ec-1", &ecKey.PublicKey))
	rsaPEM := writePEM(t, &rsaKey.PublicKey)
	ecPEM := writePEM(t, &ecKey.PublicKey)
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
jwt:
  main:
    issuer: https://issuer.test
    audience: [sluice-api]
    leeway: 5s
    hs256_secret_env: GW_TEST_SECRET
    public_keys: [%s, %s]
    jwks_url: %s
  rsaonly:
    public_keys: [%s]
routes:
  - name: api
    path_prefix: /api
    upstream: %s
    auth: main
  - {name: rsa, path_prefix: /rsa, upstream: %s, auth: rsaonly}
`, rsaPEM, ecPEM, jwks.URL, rsaPEM, up.URL, up.URL))

	past := func(c jwt.MapClaims) jwt.MapClaims {
		c["iat"], c["nbf"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Minute).Unix()
		return c
	}
	with := func(c jwt.MapClaims, k string, v any) jwt.MapClaims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	tampered := func() string {
		tok := sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims("alice"), "")
		parts := strings.Split(tok, ".")
		parts[1] = base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"admin","iss":"https://issuer.test","aud":"sluice-api","exp":9999999999}`))
		return strings.Join(parts, ".")
	}
	algNone := func() string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims("alice")).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	confused := func() string {
		// The attacker signs HS256 with the server's RSA public key as the
		// HMAC secret, hoping the verifier uses the key bytes as a secret.
		pemBytes, err := os.ReadFile(rsaPEM)
		if err != nil {
			t.Fatal(err)
		}
		return sign(t, jwt.SigningMethodHS256, pemBytes, claims("alice"), "")
	}

	tests := []struct {
		name   string
		token  string
		want   int
		detail string
	}{
		{"hs256_valid", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims("alice"), ""), 200, ""},
		{"rs256_pem_valid", sign(t, jwt.SigningMethodRS256, rsaKey, claims("alice"), ""), 200, ""},
		{"es256_pem_valid", sign(t, jwt.SigningMethodES256, ecKey, claims("alice"), ""), 200, ""},
		{"rs256_jwks_valid", sign(t, jwt.SigningMethodRS256, rsaOther, claims("alice"), "rsa-1"), 200, ""},
		{"eddsa_jwks_valid", sign(t, jwt.SigningMethodEdDSA, edKey, claims("alice"), "ed-1"), 200, ""},
		{"es256_jwks_valid", sign(t, jwt.SigningMethodES256, ecKey, claims("alice"), "ec-1"), 200, ""},
		{"expired_within_leeway", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), with(claims("alice"), "exp", time.Now().Add(-2*time.Second).Unix()), ""), 200, ""},
		{"expired", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), past(claims("alice")), ""), 401, "expired"},
		{"not_yet_valid", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), with(claims("alice"), "nbf", time.Now().Add(time.Hour).Unix()), ""), 401, "not valid yet"},
		{"no_expiry", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), with(claims("alice"), "exp", nil), ""), 401, "exp"},
		{"wrong_issuer", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), with(claims("alice"), "iss", "https://evil.test"), ""), 401, "issuer"},
		{"wrong_audience", sign(t, jwt.SigningMethodHS256, []byte(hsSecret), with(claims("alice"), "aud", "other-api"), ""), 401, "audience"},
		{"wrong_hmac_secret", sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-at-least-32-bytes!!"), claims("alice"), ""), 401, ""},
		{"unknown_rsa_key", sign(t, jwt.SigningMethodRS256, rotatedA, claims("alice"), "nope"), 401, ""},
		{"alg_none", algNone(), 401, "algorithm"},
		{"tampered_payload", tampered(), 401, "signature"},
		{"hs256_with_public_key_as_secret", confused(), 401, ""},
		{"garbage", "not.a.jwt", 401, ""},
		{"missing", "", 401, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := bearer(tt.token)
			if tt.token == "" {
				header = nil
			}
			r := do(t, "GET", gw.URL+"/api/orders", header)
			if r.status != tt.want {
				t.Fatalf("status %d, want %d: %s", r.status, tt.want, r.body)
			}
			if tt.want == 401 {
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || r.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("401 without Bearer challenge or problem body: %v %s", r.header, r.body)
				}
				if !strings.Contains(r.body, tt.detail) {
					t.Fatalf("401 detail does not say %q: %s", tt.detail, r.body)
				}
				if tt.token != "" && strings.Contains(r.body, tt.token) {
					t.Fatal("the token is echoed back")
				}
			} else if r.echo.Upstream != "app" || !r.echo.Authorization {
				t.Fatalf("upstream saw %+v", r.echo)
			}
		})
	}
}

func TestGatewayJWTAlgorithmConfusion(t *testing.T) {
	keys(t)
	rsaPEM := writePEM(t, &rsaKey.PublicKey)
	pemBytes, err := os.ReadFile(rsaPEM)
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
jwt:
  rsaonly: {public_keys: [%s]}
routes:
  - {name: rsa, path_prefix: /rsa, upstream: %s, auth: rsaonly}
`, rsaPEM, up.URL))
	// The attacker signs HS256 with the RSA public key's PEM (and DER) bytes
	// as the HMAC secret: a verifier that handed the key to any algorithm
	// would accept it.
	block := pemBytes[strings.Index(string(pemBytes), "\n")+1:]
	for name, secret := range map[string][]byte{"pem": pemBytes, "pem_body": block} {
		tok := sign(t, jwt.SigningMethodHS256, secret, claims("alice"), "")
		if r := do(t, "GET", gw.URL+"/rsa", bearer(tok)); r.status != 401 {
			t.Fatalf("%s: HS256 token keyed with the public key: %d, want 401", name, r.status)
		}
	}
	if r := do(t, "GET", gw.URL+"/rsa", bearer(sign(t, jwt.SigningMethodRS256, rsaKey, claims("alice"), ""))); r.status != 200 {
		t.Fatalf("genuine RS256 token: %d %s", r.status, r.body)
	}
}

func TestGatewayJWKSRotation(t *testing.T) {
	keys(t)
	jwks := newJWKSServer(t)
	jwks.set(rsaJWK("2026-a", &rotatedA.PublicKey))
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
jwt:
  idp: {jwks_url: %q, issuer: https://issuer.test, audience: [sluice-api]}
routes:
  - {name: api, path_prefix: /api, upstream: %q, auth: idp}
`, jwks.URL, up.URL))

	oldToken := sign(t, jwt.SigningMethodRS256, rotatedA, claims("alice"), "2026-a")
	if r := do(t, "GET", gw.URL+"/api", bearer(oldToken)); r.status != 200 {
		t.Fatalf("token of the current key: %d %s", r.status, r.body)
	}

	// The identity provider rotates: key b replaces key a.
	jwks.set(rsaJWK("2026-b", &rotatedB.PublicKey))
	newToken := sign(t, jwt.SigningMethodRS256, rotatedB, claims("alice"), "2026-b")
	// An unknown key id triggers a refetch (at most one per second).
	testenv.Eventually(t, 10*time.Second, "the token of the rotated key is accepted", func() bool {
		return do(t, "GET", gw.URL+"/api", bearer(newToken)).status == 200
	})
	if r := do(t, "GET", gw.URL+"/api", bearer(oldToken)); r.status != 401 {
		t.Fatalf("token of the retired key: %d, want 401", r.status)
	}
	// At least the fetch at start and the one the new key id caused; at
	// most one a second while waiting.
	if n := jwks.fetches.Load(); n < 2 || n > 12 {
		t.Fatalf("%d JWKS fetches, want 2 to 12: refetches are missing or not bounded", n)
	}
}

// TestGatewayJWKSDownAtStart: an identity provider that is unreachable when
// the gateway starts must not lock out tokens without a key id until the
// next background refresh (minutes away).
func TestGatewayJWKSDownAtStart(t *testing.T) {
	keys(t)
	jwks := newJWKSServer(t) // no keys yet: every fetch fails
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
jwt:
  idp: {jwks_url: %q, jwks_refresh: 1h}
routes:
  - {name: api, path_prefix: /api, upstream: %q, auth: idp}
`, jwks.URL, up.URL))
	token := bearer(sign(t, jwt.SigningMethodRS256, rotatedA, claims("alice"), ""))
	if r := do(t, "GET", gw.URL+"/api", token); r.status != 401 {
		t.Fatalf("before the keys exist: %d, want 401", r.status)
	}
	jwks.set(rsaJWK("", &rotatedA.PublicKey))
	testenv.Eventually(t, 10*time.Second, "a token without kid is accepted once the JWKS is up", func() bool {
		return do(t, "GET", gw.URL+"/api", token).status == 200
	})
	// At least the fetch at start and the one the new key id caused; at
	// most one a second while waiting.
	if n := jwks.fetches.Load(); n < 2 || n > 12 {
		t.Fatalf("%d JWKS fetches, want 2 to 12: refetches are missing or not bounded", n)
	}
}

func TestGatewayCORS(t *testing.T) {
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
cors:
  allowed_origins: [https://app.example.com]
  allow_credentials: true
  max_age: 10m
routes:
  - name: api
    path_prefix: /api
    upstream: %s
    limits: [{name: minute, algorithm: fixed_window, limit: 1, window: 1m}]
`, up.URL))
	const allowed, other = "https://app.example.com", "https://evil.example.com"
	preflight := func(origin string) response {
		return do(t, "OPTIONS", gw.URL+"/api/orders", map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization",
		})
	}

	t.Run("preflight_allowed_origin", func(t *testing.T) {
		r := preflight(allowed)
		if r.status/100 != 2 || r.header.Get("Access-Control-Allow-Origin") != allowed ||
			r.header.Get("Access-Control-Allow-Credentials") != "true" || !strings.Contains(r.header.Get("Access-Control-Allow-Methods"), "POST") ||
			r.header.Get("Access-Control-Max-Age") != "600" {
			t.Fatalf("preflight: %d %v", r.status, r.header)
		}
	})
	t.Run("preflight_disallowed_origin", func(t *testing.T) {
		r := preflight(other)
		if r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("disallowed preflight got CORS grants: %v", r.header)
		}
	})
	if up.hits.Load() != 0 {
		t.Fatal("preflights reached the upstream")
	}
	t.Run("simple_allowed_origin_exposes_rate_limit_headers", func(t *testing.T) {
		r := do(t, "GET", gw.URL+"/api/orders", map[string]string{"Origin": allowed})
		if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != allowed {
			t.Fatalf("simple: %d %v", r.status, r.header)
		}
		exposed := strings.ToLower(r.header.Get("Access-Control-Expose-Headers"))
		for _, h := range ratelimitheader.Names() {
			if !strings.Contains(exposed, strings.ToLower(h)) {
				t.Fatalf("Access-Control-Expose-Headers %q lacks %s", exposed, h)
			}
		}
		if r.header.Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("preflights consumed quota or headers missing: %v", r.header)
		}
	})
	t.Run("deny_carries_cors_headers", func(t *testing.T) {
		r := do(t, "GET", gw.URL+"/api/orders", map[string]string{"Origin": allowed})
		if r.status != 429 || r.header.Get("Access-Control-Allow-Origin") != allowed || r.header.Get("Retry-After") == "" {
			t.Fatalf("429 not readable by the browser: %d %v", r.status, r.header)
		}
	})
	t.Run("upstream_cors_headers_do_not_duplicate_the_gateways", func(t *testing.T) {
		own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.Header().Set("Access-Control-Expose-Headers", "X-Upstream")
			w.Header().Set("X-Upstream", "yes")
		}))
		defer own.Close()
		_, gw := startGateway(t, fmt.Sprintf(`
cors: {allowed_origins: [https://app.example.com], allow_credentials: true}
routes: [{name: api, path_prefix: /api, upstream: %q}]
`, own.URL))
		r := do(t, "GET", gw.URL+"/api", map[string]string{"Origin": allowed})
		if got := r.header.Values("Access-Control-Allow-Origin"); len(got) != 1 || got[0] != allowed {
			t.Fatalf("Access-Control-Allow-Origin %q, want exactly [%s]", got, allowed)
		}
		if r.header.Get("X-Upstream") != "yes" || len(r.header.Values("Access-Control-Expose-Headers")) != 1 {
			t.Fatalf("headers %v", r.header)
		}
	})
	t.Run("origin_written_with_a_trailing_slash_and_subdomain_wildcard", func(t *testing.T) {
		_, gw := startGateway(t, fmt.Sprintf(`
cors: {allowed_origins: ["https://app.example.com/", "https://*.example.org"], allow_credentials: true}
routes: [{name: api, path_prefix: /api, upstream: %q}]
`, up.URL))
		for origin, want := range map[string]string{
			allowed: allowed, "https://a.example.org": "https://a.example.org",
			"https://example.org.evil.com": "", "https://evilexample.org": "",
		} {
			if got := do(t, "GET", gw.URL+"/api", map[string]string{"Origin": origin}).header.Get("Access-Control-Allow-Origin"); got != want {
				t.Errorf("Origin %s: Access-Control-Allow-Origin %q, want %q", origin, got, want)
			}
		}
	})
	t.Run("simple_disallowed_origin", func(t *testing.T) {
		r := do(t, "GET", gw.URL+"/api/orders", map[string]string{"Origin": other})
		if r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("disallowed origin granted: %v", r.header)
		}
	})
}

func TestGatewayLimitsBySubjectElseClientIP(t *testing.T) {
	keys(t)
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	config := func(trusted string) string {
		return fmt.Sprintf(`
trusted_proxies: %s
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET, issuer: https://issuer.test, audience: [sluice-api]}
routes:
  - name: api
    path_prefix: /api
    upstream: %s
    auth: main
    auth_optional: true
    limits: [{name: hour, algorithm: fixed_window, limit: 1, window: 1h}]
`, trusted, up.URL)
	}
	token := func(sub string) map[string]string {
		return bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims(sub), ""))
	}
	xff := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }

	t.Run("spoofed_xff_from_untrusted_peer_is_ignored", func(t *testing.T) {
		_, gw := startGateway(t, config("{}"))
		first := do(t, "GET", gw.URL+"/api", xff("198.51.100.1"))
		second := do(t, "GET", gw.URL+"/api", xff("198.51.100.2"))
		if first.status != 200 || second.status != 429 {
			t.Fatalf("statuses %d %d, want 200 429: a new X-Forwarded-For must not buy a new bucket", first.status, second.status)
		}
		if first.echo.XForwardedFor != "127.0.0.1" {
			t.Fatalf("upstream saw X-Forwarded-For %q, want the real peer 127.0.0.1", first.echo.XForwardedFor)
		}
	})
	t.Run("xff_from_trusted_proxy_is_believed", func(t *testing.T) {
		_, gw := startGateway(t, config("{cidrs: [127.0.0.1/32]}"))
		a := do(t, "GET", gw.URL+"/api", xff("6.6.6.6, 198.51.100.1"))
		b := do(t, "GET", gw.URL+"/api", xff("198.51.100.2"))
		c := do(t, "GET", gw.URL+"/api", xff("7.7.7.7, 198.51.100.1"))
		if a.status != 200 || b.status != 200 || c.status != 429 {
			t.Fatalf("statuses %d %d %d, want 200 200 429 (keyed by the right-most untrusted hop)", a.status, b.status, c.status)
		}
		// The upstream gets the chain the gateway vouches for: the client
		// and the trusted peer, not the spoofed 6.6.6.6.
		if a.echo.XForwardedFor != "198.51.100.1, 127.0.0.1" {
			t.Fatalf("upstream saw X-Forwarded-For %q, want \"198.51.100.1, 127.0.0.1\"", a.echo.XForwardedFor)
		}
	})
	t.Run("scheme_and_host_believed_only_from_a_trusted_peer", func(t *testing.T) {
		lb := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com"}
		_, untrusting := startGateway(t, config("{}"))
		r := do(t, "GET", untrusting.URL+"/api", lb)
		if r.echo.XForwardedProto != "http" || r.echo.XForwardedHost != strings.TrimPrefix(untrusting.URL, "http://") {
			t.Fatalf("untrusted peer: upstream told %s %s, want the gateway's own http and host", r.echo.XForwardedProto, r.echo.XForwardedHost)
		}
		_, trusting := startGateway(t, config("{cidrs: [127.0.0.1/32]}"))
		r = do(t, "GET", trusting.URL+"/api", lb)
		if r.echo.XForwardedProto != "https" || r.echo.XForwardedHost != "api.example.com" {
			t.Fatalf("trusted balancer: upstream told %s %s, want https api.example.com", r.echo.XForwardedProto, r.echo.XForwardedHost)
		}
		// Another client: the route allows one request an hour each.
		bad := map[string]string{"X-Forwarded-Proto": "javascript", "X-Forwarded-Host": "evil.com/x", "X-Forwarded-For": "198.51.100.77"}
		r = do(t, "GET", trusting.URL+"/api", bad)
		if r.echo.XForwardedProto != "http" || r.echo.XForwardedHost != strings.TrimPrefix(trusting.URL, "http://") {
			t.Fatalf("malformed values from the balancer: upstream told %s %s, want the gateway's own", r.echo.XForwardedProto, r.echo.XForwardedHost)
		}
	})
	t.Run("chain_of_trusted_proxies_is_forwarded", func(t *testing.T) {
		_, gw := startGateway(t, config("{cidrs: [127.0.0.1/32, 10.0.0.0/8]}"))
		r := do(t, "GET", gw.URL+"/api", xff("6.6.6.6, 10.9.9.9, 198.51.100.1, 10.0.0.5"))
		if r.status != 200 || r.echo.XForwardedFor != "198.51.100.1, 10.0.0.5, 127.0.0.1" {
			t.Fatalf("%d, upstream saw X-Forwarded-For %q, want the client then the trusted hops: \"198.51.100.1, 10.0.0.5, 127.0.0.1\"", r.status, r.echo.XForwardedFor)
		}
		// The upstream, trusting the same proxies and the gateway, finds
		// the client the gateway limited.
		in := httptest.NewRequest("GET", "/", nil)
		in.RemoteAddr = "127.0.0.1:1"
		in.Header.Set("X-Forwarded-For", r.echo.XForwardedFor)
		cidrs, _ := middleware.ParseCIDRs([]string{"127.0.0.1/32", "10.0.0.0/8"})
		if got := middleware.ClientIP(middleware.TrustedProxies{CIDRs: cidrs})(in); got != "198.51.100.1" {
			t.Fatalf("upstream finds client %q, want 198.51.100.1", got)
		}
	})
	t.Run("subjects_are_limited_independently_of_ip", func(t *testing.T) {
		_, gw := startGateway(t, config("{}"))
		results := []int{
			do(t, "GET", gw.URL+"/api", token("alice")).status,
			do(t, "GET", gw.URL+"/api", token("bob")).status,
			do(t, "GET", gw.URL+"/api", nil).status, // anonymous: by IP
			do(t, "GET", gw.URL+"/api", token("alice")).status,
			do(t, "GET", gw.URL+"/api", nil).status,
		}
		want := []int{200, 200, 200, 429, 429}
		for i := range want {
			if results[i] != want[i] {
				t.Fatalf("statuses %v, want %v", results, want)
			}
		}
	})
	t.Run("invalid_token_is_refused_before_limiting", func(t *testing.T) {
		_, gw := startGateway(t, config("{}"))
		bad := bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims("mallory"), "") + "x")
		for range 3 {
			if r := do(t, "GET", gw.URL+"/api", bad); r.status != 401 || r.header.Get("X-RateLimit-Remaining") != "" {
				t.Fatalf("bad token: %d %v, want 401 without rate-limit headers", r.status, r.header)
			}
		}
		if r := do(t, "GET", gw.URL+"/api", nil); r.status != 200 {
			t.Fatalf("refused tokens consumed the address's quota: %d", r.status)
		}
	})
}

func TestGatewayRouting(t *testing.T) {
	orders, users := newUpstream(t, "orders"), newUpstream(t, "users")
	_, gw := startGateway(t, fmt.Sprintf(`
routes:
  - {name: orders, path_prefix: /api/orders, upstream: %q, methods: [get, POST], strip_prefix: true}
  - {name: api, path_prefix: /api, upstream: %q, timeout: 100ms}
`, orders.URL+"/v2", users.URL))
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantUpstream       string
		wantPath           string
	}{
		{"longest_prefix_with_strip", "GET", "/api/orders/17", 200, "orders", "/v2/17"},
		{"exact_prefix_with_strip", "POST", "/api/orders", 200, "orders", "/v2/"},
		{"prefix_matches_whole_segments", "GET", "/api/ordersx", 200, "users", "/api/ordersx"},
		{"method_falls_through_to_shorter_prefix", "DELETE", "/api/orders/17", 200, "users", "/api/orders/17"},
		{"no_route", "GET", "/other", 404, "", ""},
		{"upstream_timeout", "GET", "/api/slow", 504, "", ""},
		{"healthz_not_on_the_public_port", "GET", "/healthz", 404, "", ""},
		{"metrics_not_on_the_public_port", "GET", "/metrics", 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, gw.URL+tt.path, nil)
			if r.status != tt.wantStatus || r.echo.Upstream != tt.wantUpstream || r.echo.Path != tt.wantPath {
				t.Fatalf("%d from %q path %q, want %d from %q path %q (%s)", r.status, r.echo.Upstream, r.echo.Path, tt.wantStatus, tt.wantUpstream, tt.wantPath, r.body)
			}
		})
	}
	t.Run("method_not_allowed", func(t *testing.T) {
		_, gw := startGateway(t, fmt.Sprintf(`
routes:
  - {name: orders, path_prefix: /api/orders, upstream: %q, methods: [GET, POST]}
`, orders.URL))
		r := do(t, "DELETE", gw.URL+"/api/orders/1", nil)
		if r.status != 405 || r.header.Get("Allow") != "GET, POST" {
			t.Fatalf("%d Allow %q, want 405 with Allow: GET, POST", r.status, r.header.Get("Allow"))
		}
	})
}

// TestGatewayMetrics: decisions and per-route answers are on the admin
// handler, by route and status class, with upstream timings; nothing names
// a client.
func TestGatewayMetrics(t *testing.T) {
	up := newUpstream(t, "app")
	gw, srv := startGateway(t, fmt.Sprintf(`
routes:
  - {name: api, path_prefix: /api, upstream: %q, limits: [{name: m, algorithm: fixed_window, limit: 1, window: 1m}]}
`, up.URL))
	do(t, "GET", srv.URL+"/api", nil)
	do(t, "GET", srv.URL+"/api", nil)
	do(t, "GET", srv.URL+"/nowhere", nil)
	admin := httptest.NewServer(gw.AdminHandler())
	t.Cleanup(admin.Close)
	r := do(t, "GET", admin.URL+"/metrics", nil)
	for _, want := range []string{
		`sluice_decisions_total{domain="",result="allowed",rule="api",source="gateway",tenant=""} 1`,
		`sluice_decisions_total{domain="",result="denied",rule="api",source="gateway",tenant=""} 1`,
		`sluice_check_duration_seconds_count{source="gateway"} 2`,
		`sluice_gateway_requests_total{class="2xx",route="api"} 1`,
		`sluice_gateway_requests_total{class="4xx",route="api"} 1`,
		`sluice_gateway_requests_total{class="4xx",route="_unmatched"} 1`,
		`sluice_gateway_upstream_duration_seconds_count{class="2xx",route="api"} 1`,
		`sluice_gateway_upstream_duration_seconds_count{class="4xx",route="api"} 0`,
	} {
		if !strings.Contains(r.body, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, r.body)
		}
	}
	if strings.Contains(r.body, "127.0.0.1") {
		t.Fatal("/metrics mentions a client address")
	}
	if r := do(t, "GET", admin.URL+"/healthz", nil); r.status != http.StatusOK {
		t.Fatalf("admin /healthz: %d", r.status)
	}
}

// TestGatewaysShareRedis puts two gateway instances, each in front of its own
// upstream, on one Redis: together they admit exactly the limit.
func TestGatewaysShareRedis(t *testing.T) {
	keys(t)
	t.Setenv("GW_TEST_SECRET", hsSecret)
	redis := testenv.Redis(t)
	config := func(up *upstream) string {
		return fmt.Sprintf(`
redis: %s
# Long enough for a loaded machine: exactness is under test, and the
# stopped Redis below refuses connections at once.
store_timeout: 5s
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET}
routes:
  - name: api
    path_prefix: /api
    upstream: %s
    auth: main
    limits: [{name: hour, algorithm: sliding_window, limit: 20, window: 1h}]
  - {name: open, path_prefix: /open, upstream: %s, failure_mode: open, limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]}
  - {name: closed, path_prefix: /closed, upstream: %s, failure_mode: closed, limits: [{name: m, algorithm: fixed_window, limit: 100, window: 1m}]}
`, redis.URL(), up.URL, up.URL, up.URL)
	}
	upA, upB := newUpstream(t, "a"), newUpstream(t, "b")
	_, gwA := startGateway(t, config(upA))
	_, gwB := startGateway(t, config(upB))

	t.Run("exactly_the_limit_under_concurrency", func(t *testing.T) {
		token := bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), jwt.MapClaims{"sub": "shared-user", "exp": time.Now().Add(time.Hour).Unix()}, ""))
		var wg sync.WaitGroup
		var allowed, denied atomic.Int64
		for i := range 80 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				url := gwA.URL
				if i%2 == 1 {
					url = gwB.URL
				}
				switch r := do(t, "GET", url+"/api/x", token); r.status {
				case 200:
					allowed.Add(1)
				case 429:
					denied.Add(1)
				default:
					t.Errorf("status %d: %s", r.status, r.body)
				}
			}()
		}
		wg.Wait()
		if allowed.Load() != 20 || denied.Load() != 60 || upA.hits.Load()+upB.hits.Load() != 20 {
			t.Fatalf("allowed %d, denied %d, upstreams saw %d+%d; want exactly 20 allowed", allowed.Load(), denied.Load(), upA.hits.Load(), upB.hits.Load())
		}
	})

	t.Run("redis_stopped_fail_open_and_closed", func(t *testing.T) {
		redis.Stop()
		defer redis.Start()
		for range 8 { // past the breaker threshold too
			if r := do(t, "GET", gwA.URL+"/open", nil); r.status != 200 || r.echo.Upstream != "a" {
				t.Fatalf("fail-open route: %d %s", r.status, r.body)
			}
			r := do(t, "GET", gwB.URL+"/closed", nil)
			if r.status != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("fail-closed route: %d %v %s", r.status, r.header, r.body)
			}
		}
	})
}

// TestGatewayStartsWithoutRedis: a gateway started while Redis is down
// starts, answers each route by its failure mode, says so on /readyz, and
// has its checks decided by Redis once Redis comes.
func TestGatewayStartsWithoutRedis(t *testing.T) {
	redis := testenv.Redis(t)
	redis.Stop() // nothing listens on its port until Start
	up := newUpstream(t, "a")
	gw, srv := startGateway(t, fmt.Sprintf(`
redis: %s
store_timeout: 5s
routes:
  - {name: open, path_prefix: /open, upstream: %s, failure_mode: open, limits: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}
  - {name: closed, path_prefix: /closed, upstream: %s, failure_mode: closed, limits: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}
`, redis.URL(), up.URL, up.URL))
	admin := httptest.NewServer(gw.AdminHandler())
	t.Cleanup(admin.Close)

	for range 5 { // more than the limit: nothing is counted
		if r := do(t, "GET", srv.URL+"/open", nil); r.status != 200 || r.echo.Upstream != "a" {
			t.Fatalf("fail-open route before Redis answers: %d %s", r.status, r.body)
		}
		if r := do(t, "GET", srv.URL+"/closed", nil); r.status != 503 || r.header.Get("Retry-After") == "" {
			t.Fatalf("fail-closed route before Redis answers: %d %v %s", r.status, r.header, r.body)
		}
	}
	r := do(t, "GET", admin.URL+"/readyz", nil)
	if r.status != 503 || !strings.Contains(r.body, `"store":"connecting"`) || !strings.Contains(r.body, `"closed"`) {
		t.Errorf("/readyz before Redis answers: %d %s, want 503 naming the store connecting and the fail-closed route", r.status, r.body)
	}

	redis.Start()
	testenv.Eventually(t, 30*time.Second, "/readyz 200 once Redis answers", func() bool {
		return do(t, "GET", admin.URL+"/readyz", nil).status == 200
	})
	// The breaker may still be open from the failures before: wait for
	// its probe, then the counts are Redis's, exactly.
	testenv.Eventually(t, 30*time.Second, "the fail-closed route decided by Redis", func() bool {
		return do(t, "GET", srv.URL+"/closed", nil).status == 200
	})
	if r := do(t, "GET", srv.URL+"/closed", nil); r.status != 200 {
		t.Fatalf("second request once Redis answers: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", srv.URL+"/closed", nil); r.status != 429 {
		t.Fatalf("third request once Redis answers: %d %s, want 429 (limit 2, counted by Redis)", r.status, r.body)
	}
	if n, err := redis.Do("DBSIZE"); err != nil || n == "0" {
		t.Errorf("Redis holds no counters: %q %v", n, err)
	}
}

// TestGatewayCountsInTheStoreItIsHanded: the gateway opens no store of its
// own: it needs one, counts in the one it is given (two gateways handed one
// Redis store admit the limit together), and leaves it open on Close, since
// the caller owns it.
func TestGatewayCountsInTheStoreItIsHanded(t *testing.T) {
	redis := testenv.Redis(t)
	up := newUpstream(t, "app")
	cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf(`
redis: %s
routes:
  - {name: api, path_prefix: /api, upstream: %q, failure_mode: closed, limits: [{name: m, algorithm: fixed_window, limit: 2, window: 1h}]}
`, redis.URL(), up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(cfg, gateway.Options{}); err == nil || !strings.Contains(err.Error(), "Store is required") {
		t.Fatalf("New without a store: err = %v, want one asking for it", err)
	}
	store := storeOf(t, cfg)
	one, err := gateway.New(cfg, gateway.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	two, err := gateway.New(cfg, gateway.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	status := func(gw *gateway.Gateway) int {
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, httptest.NewRequest("GET", "/api", nil))
		return w.Code
	}
	if a, b := status(one), status(two); a != 200 || b != 200 {
		t.Fatalf("first request through each gateway: %d, %d, want 200, 200", a, b)
	}
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}
	// A closed store would fail this closed route with 503: 429 says the
	// store is open and holds both gateways' counts.
	if code := status(two); code != http.StatusTooManyRequests {
		t.Fatalf("third request, after the other gateway closed: %d, want 429 from the shared, still open store", code)
	}
}
