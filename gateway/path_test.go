package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// pathConfig has an anonymous route that strips its prefix onto a base path
// (spub), an anonymous route without a base path (pub), and a JWT route
// (hs) on its own upstream: the layout of the audit's escapes (issue 10).
func pathConfig(spub, pub, hs *upstream) string {
	return fmt.Sprintf(`
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET}
routes:
  - {name: spub, path_prefix: /spub, upstream: %q, strip_prefix: true}
  - {name: pub, path_prefix: /pub, upstream: %q}
  - {name: hs, path_prefix: /hs, upstream: %q, auth: main}
`, spub.URL+"/public/v1", pub.URL, hs.URL+"/internal")
}

func TestGatewayPathTraversal(t *testing.T) {
	keys(t)
	t.Setenv("GW_TEST_SECRET", hsSecret)
	spub, pub, hs := newUpstream(t, "spub"), newUpstream(t, "pub"), newUpstream(t, "hs")
	_, gw := startGateway(t, pathConfig(spub, pub, hs))
	token := bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), claims("alice"), ""))

	tests := []struct {
		name, target string
		header       map[string]string
		wantStatus   int
		wantUpstream string
		// wantURI is the request target the upstream received.
		wantURI string
	}{
		// The audit's request: encoded dot segments out of the base path.
		{"encoded_dotdot_out_of_base", "/spub/%2e%2e/%2e%2e/admin/secret", nil, 400, "", ""},
		{"encoded_dotdot_upper_case", "/spub/%2E%2E/%2E%2E/admin/secret", nil, 400, "", ""},
		{"half_encoded_dotdot", "/spub/.%2e/admin", nil, 400, "", ""},
		{"other_half_encoded_dotdot", "/spub/%2e./admin", nil, 400, "", ""},
		{"encoded_dot", "/spub/%2e/x", nil, 400, "", ""},
		{"encoded_dotdot_last", "/spub/%2e%2e", nil, 400, "", ""},
		{"dotdot_encoded_slash", "/spub/..%2fadmin", nil, 400, "", ""},
		{"encoded_slash", "/spub/a%2fb", nil, 400, "", ""},
		{"encoded_slash_upper_case", "/spub/a%2Fb", nil, 400, "", ""},
		{"encoded_backslash", "/spub/..%5cadmin", nil, 400, "", ""},
		{"backslash", `/spub/..\admin`, nil, 400, "", ""},
		{"double_encoded_dotdot", "/spub/%252e%252e/admin", nil, 400, "", ""},
		{"double_encoded_slash", "/spub/a%252fb", nil, 400, "", ""},
		{"dotdot_with_parameter", "/spub/..;x/admin", nil, 400, "", ""},
		{"not_a_path", "*", nil, 400, "", ""},
		// The audit's route confusion: an anonymous route's prefix, then
		// a JWT route's path once resolved.
		{"encoded_dotdot_into_jwt_route", "/pub/%2e%2e/hs/x", nil, 400, "", ""},
		{"dotdot_into_jwt_route_needs_its_token", "/pub/../hs/x", nil, 401, "", ""},
		{"dotdot_into_jwt_route_with_token", "/pub/../hs/x", token, 200, "hs", "/internal/hs/x"},
		{"encoded_dotdot_out_of_jwt_route", "/hs/%2e%2e/pub/x", token, 400, "", ""},
		{"dotdot_out_of_jwt_route", "/hs/../pub/x", nil, 200, "pub", "/pub/x"},
		// Plain dot segments and repeated slashes are resolved before
		// matching, so they cannot leave a base path either.
		{"dotdot_out_of_base_is_resolved_first", "/spub/../../admin/secret", nil, 404, "", ""},
		{"dotdot_to_another_route", "/spub/../pub/x", nil, 200, "pub", "/pub/x"},
		{"dotdot_to_the_prefix_itself", "/spub/..", nil, 404, "", ""},
		{"dotdot_within_the_route", "/spub/a/../x", nil, 200, "spub", "/public/v1/x"},
		{"dot_segment", "/spub/./x", nil, 200, "spub", "/public/v1/x"},
		{"double_slash", "/spub//x", nil, 200, "spub", "/public/v1/x"},
		{"leading_double_slash", "//spub/x", nil, 200, "spub", "/public/v1/x"},
		{"trailing_slash_kept", "/spub/x/", nil, 200, "spub", "/public/v1/x/"},
		{"exact_prefix", "/spub", nil, 200, "spub", "/public/v1/"},
		{"encoded_dot_inside_a_name", "/spub/file%2Etxt", nil, 200, "spub", "/public/v1/file.txt"},
		{"dots_that_are_a_name", "/spub/.../x", nil, 200, "spub", "/public/v1/.../x"},
		{"encoded_space_reencoded", "/spub/a%20b", nil, 200, "spub", "/public/v1/a%20b"},
		{"query_kept", "/spub/./x?a=%2e%2e", nil, 200, "spub", "/public/v1/x?a=%2e%2e"},
		{"healthz_is_no_route", "/spub/../healthz", nil, 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := spub.hits.Load() + pub.hits.Load() + hs.hits.Load()
			r := doRaw(t, gw.URL, "GET", tt.target, tt.header)
			if r.status != tt.wantStatus || r.echo.Upstream != tt.wantUpstream || r.echo.RequestURI != tt.wantURI {
				t.Fatalf("GET %s: %d from %q as %q, want %d from %q as %q (%s)",
					tt.target, r.status, r.echo.Upstream, r.echo.RequestURI, tt.wantStatus, tt.wantUpstream, tt.wantURI, r.body)
			}
			if tt.wantUpstream == "" && spub.hits.Load()+pub.hits.Load()+hs.hits.Load() != before {
				t.Fatal("the request reached an upstream")
			}
			if tt.wantStatus == 400 {
				if r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(r.body, `"detail":"The request path`) {
					t.Fatalf("400 without a problem saying what is wrong with the path: %v %s", r.header, r.body)
				}
			}
		})
	}
}

// FuzzForwardedPath sends any request target through the gateway to real
// upstreams: a request is refused (400) only for what the path rules refuse,
// and always for an encoded slash, backslash or dot segment; otherwise the
// route answering is the one of the cleaned path, and the path its upstream
// receives is the cleaned path under the upstream's base path, never outside.
func FuzzForwardedPath(f *testing.F) {
	keys(f)
	f.Setenv("GW_TEST_SECRET", hsSecret)
	type fuzzRoute struct {
		name, prefix, base string
		strip, auth        bool
		up                 *upstream
	}
	routes := []*fuzzRoute{
		{name: "spub", prefix: "/spub", base: "/public/v1", strip: true},
		{name: "pub", prefix: "/pub"},
		{name: "hs", prefix: "/hs", base: "/internal", auth: true},
		{name: "tree", prefix: "/tree/", base: "/t/", strip: true},
		{name: "deep", prefix: "/pub/deep", base: "/d"},
	}
	var config strings.Builder
	config.WriteString("jwt: {main: {hs256_secret_env: GW_TEST_SECRET}}\nroutes:\n")
	for _, r := range routes {
		r.up = newUpstream(f, r.name)
		auth := ""
		if r.auth {
			auth = ", auth: main"
		}
		fmt.Fprintf(&config, "  - {name: %s, path_prefix: %q, upstream: %q, strip_prefix: %t%s}\n", r.name, r.prefix, r.up.URL+r.base, r.strip, auth)
	}
	gw, _ := startGateway(f, config.String())
	hits := func() (n int64) {
		for _, r := range routes {
			n += r.up.hits.Load()
		}
		return n
	}
	// routeFor is the route the spec gives a cleaned path: the longest
	// prefix matching whole segments.
	routeFor := func(p string) *fuzzRoute {
		var best *fuzzRoute
		for _, r := range routes {
			if p == r.prefix || strings.HasPrefix(p, strings.TrimSuffix(r.prefix, "/")+"/") {
				if best == nil || len(r.prefix) > len(best.prefix) {
					best = r
				}
			}
		}
		return best
	}

	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsAny(target, "\r\n") {
			t.Skip("not one request line")
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: gateway.test\r\n\r\n")))
		if err != nil {
			t.Skip("the server would not parse it either")
		}
		req.RemoteAddr = "192.0.2.1:1234"
		rawPath, _, _ := strings.Cut(req.RequestURI, "?")
		if req.URL.RawPath != "" {
			rawPath = req.URL.RawPath
		}
		decoded := req.URL.Path

		// What must be refused: encoded slashes and backslashes, at any
		// depth of encoding, and segments that are dot segments only once
		// decoded.
		mustRefuse := !strings.HasPrefix(decoded, "/")
		for _, p := range []string{rawPath, decoded} {
			lower := strings.ToLower(p)
			if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(p, `\`) {
				mustRefuse = true
			}
			for seg := range strings.SplitSeq(p, "/") {
				if dec, err := url.PathUnescape(seg); err == nil && seg != dec && (dec == "." || dec == "..") {
					mustRefuse = true
				}
			}
		}
		mayRefuse := mustRefuse || strings.Contains(strings.ToLower(rawPath+decoded), "%2e") || strings.Contains(decoded, ";")

		before := hits()
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		var got echo
		json.Unmarshal(rec.Body.Bytes(), &got)
		proxied := hits() != before

		if rec.Code == 400 {
			if !mayRefuse {
				t.Fatalf("GET %s: refused, but nothing in the path calls for it: %s", target, rec.Body)
			}
			if proxied {
				t.Fatalf("GET %s: refused, yet an upstream was called", target)
			}
			return
		}
		if mustRefuse {
			t.Fatalf("GET %s: %d, want 400 (path %q, raw %q)", target, rec.Code, decoded, rawPath)
		}

		clean := path.Clean(decoded)
		if strings.HasSuffix(decoded, "/") && clean != "/" {
			clean += "/"
		}
		want := routeFor(clean)
		switch {
		case want == nil:
			if rec.Code != 404 || proxied {
				t.Fatalf("GET %s: %d (proxied %t), want 404: no route has %q", target, rec.Code, proxied, clean)
			}
		case want.auth:
			if rec.Code != 401 || proxied {
				t.Fatalf("GET %s: %d from %q, want 401 from route %s of %q (no token was sent)", target, rec.Code, got.Upstream, want.name, clean)
			}
		default:
			if rec.Code != 200 || got.Upstream != want.name {
				t.Fatalf("GET %s: %d from %q, want 200 from route %s of %q: %s", target, rec.Code, got.Upstream, want.name, clean, rec.Body)
			}
			base := strings.TrimSuffix(want.base, "/")
			if got.Path != base && !strings.HasPrefix(got.Path, base+"/") {
				t.Fatalf("GET %s: upstream %s got %q, outside its base path %q", target, want.name, got.Path, want.base)
			}
			if c := path.Clean(got.Path); c != got.Path && c+"/" != got.Path {
				t.Fatalf("GET %s: upstream got %q, which is not a clean path", target, got.Path)
			}
			rest := clean
			if want.strip {
				rest = strings.TrimPrefix(clean, strings.TrimSuffix(want.prefix, "/"))
				if !strings.HasPrefix(rest, "/") {
					rest = "/" + rest
				}
			}
			if got.Path != viaJSON(base+rest) {
				t.Fatalf("GET %s: upstream got %q, want %q", target, got.Path, base+rest)
			}
			uri, _, _ := strings.Cut(got.RequestURI, "?")
			if u, err := url.PathUnescape(uri); err != nil || viaJSON(u) != got.Path {
				t.Fatalf("GET %s: upstream got the target %q, which does not decode to its path %q", target, got.RequestURI, got.Path)
			}
		}
	})
}

// viaJSON is s as it reads after the upstream's JSON echo, which replaces
// bytes that are not UTF-8.
func viaJSON(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}
