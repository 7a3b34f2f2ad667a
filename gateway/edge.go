package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicelabs/sluice/middleware"
)

// defaultAdminListen keeps health and metrics off the public port and off
// the network unless asked: Prometheus or a probe on another host needs an
// explicit admin_listen.
const defaultAdminListen = "127.0.0.1:9081"

// KeyConfig says what a route's limits count by. At most one of Claim and
// Header is set; a request that lacks it (no token on an auth_optional
// route, no header) is counted by client IP.
type KeyConfig struct {
	// Claim names a claim of the verified JWT, such as "sub" (the
	// default), "tenant_id" or "client_id". It needs the route's auth.
	Claim string `yaml:"claim"`
	// Header names a request header holding an API key, such as
	// "X-API-Key". The gateway does not verify the key: each distinct value
	// has its own quota, so a caller inventing values gets a fresh quota for
	// each, and the upstream must refuse keys it does not know.
	Header string `yaml:"header"`
}

// headerNamePattern is an HTTP field name (RFC 9110 token).
var headerNamePattern = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

// reservedHeaders cannot carry claims: the proxy and HTTP own them.
var reservedHeaders = map[string]bool{
	"Authorization": true, "Host": true, "Connection": true, "Content-Length": true, "Content-Type": true,
	"Transfer-Encoding": true, "Te": true, "Trailer": true, "Upgrade": true, "Keep-Alive": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Cookie": true,
	"X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true, "Forwarded": true,
	"Traceparent": true, "Tracestate": true,
}

func validateHeaderName(field, name string) error {
	if !headerNamePattern.MatchString(name) {
		return fmt.Errorf("%s: %q is not an HTTP header name", field, name)
	}
	if reservedHeaders[http.CanonicalHeaderKey(name)] {
		return fmt.Errorf("%s: %s is a header the proxy or HTTP itself sets; choose another, like X-User-Id", field, http.CanonicalHeaderKey(name))
	}
	return nil
}

func (k *KeyConfig) validate(auth string) error {
	switch {
	case k.Claim != "" && k.Header != "":
		return errors.New("key: set claim or header, not both")
	case k.Claim == "" && k.Header == "":
		return errors.New("key: set claim (a verified JWT claim) or header (an API-key header), or remove key to count by the token's sub")
	case k.Claim != "" && auth == "":
		return fmt.Errorf("key.claim: %q is a claim of a verified token, which needs auth to name a verifier", k.Claim)
	case k.Header != "":
		return validateHeaderName("key.header", k.Header)
	}
	return nil
}

// keyFunc is what a route's limits count by: the configured claim or header,
// else the token's sub; in every case the client IP when that is missing.
func (r RouteConfig) keyFunc(trusted middleware.TrustedProxies) middleware.KeyFunc {
	first, kind := middleware.JWTClaim("sub"), "sub"
	switch {
	case r.Key != nil && r.Key.Claim != "":
		first, kind = middleware.JWTClaim(r.Key.Claim), "claim:"+r.Key.Claim
	case r.Key != nil && r.Key.Header != "":
		first, kind = middleware.Header(r.Key.Header), "header:"+http.CanonicalHeaderKey(r.Key.Header)
	}
	// The access log names the kind of key a request was counted by, never
	// its value.
	return middleware.FirstOf(notedKey(first, kind), notedKey(middleware.ClientIP(trusted), "ip"))
}

func validateClaimHeaders(claims map[string]string, auth string) error {
	if len(claims) == 0 {
		return nil
	}
	if auth == "" {
		return errors.New("claim_headers: claims come from a verified token, which needs auth to name a verifier")
	}
	seen := map[string]string{}
	for _, claim := range sortedKeys(claims) {
		header := claims[claim]
		if claim == "" {
			return errors.New("claim_headers: a claim name is empty")
		}
		if err := validateHeaderName("claim_headers."+claim, header); err != nil {
			return err
		}
		canonical := http.CanonicalHeaderKey(header)
		if other, ok := seen[canonical]; ok {
			return fmt.Errorf("claim_headers.%s: header %s already carries claim %q", claim, canonical, other)
		}
		seen[canonical] = claim
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// claimHeader is one verified claim passed upstream in a header.
type claimHeader struct {
	claim, header string // header canonical
}

func newClaimHeaders(claims map[string]string) []claimHeader {
	out := make([]claimHeader, 0, len(claims))
	for _, claim := range sortedKeys(claims) {
		out = append(out, claimHeader{claim: claim, header: http.CanonicalHeaderKey(claims[claim])})
	}
	return out
}

// setClaimHeaders removes every copy of the claim headers the client sent,
// so an upstream never mistakes a forged one for the gateway's, then sets
// each from the verified claims of the request, when it has that claim.
func setClaimHeaders(out http.Header, claims map[string]any, headers []claimHeader) {
	for _, ch := range headers {
		delete(out, ch.header)
		if v, ok := claimValue(claims, ch.claim); ok {
			out[ch.header] = []string{v}
		}
	}
}

// claimValue renders a claim as a header value: strings as they are, numbers
// and booleans in their JSON form, lists of strings joined with commas.
// Objects and values with control characters are left out: a header cannot
// carry them faithfully.
func claimValue(claims map[string]any, name string) (string, bool) {
	var s string
	switch v := claims[name].(type) {
	case string:
		s = v
	case float64:
		s = strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		s = strconv.FormatBool(v)
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			str, ok := e.(string)
			if !ok || strings.Contains(str, ",") {
				return "", false
			}
			parts = append(parts, str)
		}
		s = strings.Join(parts, ",")
	default:
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "", false
		}
	}
	return s, true
}

func validateAdminListen(admin, listen string) error {
	if _, _, err := net.SplitHostPort(admin); err != nil {
		return fmt.Errorf("admin_listen: %q is not a host:port address, like %s", admin, defaultAdminListen)
	}
	if admin == listen {
		return fmt.Errorf("admin_listen: %s is the public listen address too; health and metrics need a listener of their own", admin)
	}
	return nil
}
