package middleware

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// A KeyFunc returns the key a request is counted under: a client IP, an API
// key, a user id. An empty key means the request carries none (see
// Options.RejectEmptyKey for what happens then).
type KeyFunc func(r *http.Request) string

// Func turns any function of the request into a KeyFunc.
func Func(f func(r *http.Request) string) KeyFunc { return KeyFunc(f) }

// Header keys requests by the value of header name, such as "X-API-Key". The
// value is hashed into the store's key like any subject, so it is never
// stored or shown in clear.
func Header(name string) KeyFunc {
	canonical := http.CanonicalHeaderKey(name)
	return func(r *http.Request) string {
		return strings.TrimSpace(r.Header.Get(canonical))
	}
}

// Compose keys requests by every part together, such as the API key and the
// client IP: the key is empty if any part is empty. Parts are length-prefixed,
// so no choice of values can make two different tuples produce one key.
func Compose(parts ...KeyFunc) KeyFunc {
	return func(r *http.Request) string {
		var b strings.Builder
		for _, part := range parts {
			k := part(r)
			if k == "" {
				return ""
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
		}
		return b.String()
	}
}

// FirstOf keys requests by the first of keys that is not empty, such as the
// authenticated user, else the client IP. Each key is tagged with the position
// of the function that produced it, so a user named "203.0.113.7" does not
// share the bucket of that IP address.
func FirstOf(keys ...KeyFunc) KeyFunc {
	return func(r *http.Request) string {
		for i, key := range keys {
			if k := key(r); k != "" {
				return strconv.Itoa(i) + ":" + k
			}
		}
		return ""
	}
}

type claimsKey struct{}

// WithClaims returns a context carrying the verified claims of the request's
// credentials (a JWT's payload). An authentication layer calls it before the
// limiter runs; JWTClaim reads them.
func WithClaims(ctx context.Context, claims map[string]any) context.Context {
	return context.WithValue(ctx, claimsKey{}, claims)
}

// ClaimsFrom returns the claims stored by WithClaims.
func ClaimsFrom(ctx context.Context) (map[string]any, bool) {
	claims, ok := ctx.Value(claimsKey{}).(map[string]any)
	return claims, ok
}

// JWTClaim keys requests by a claim, such as "sub", of the claims an
// authentication layer stored with WithClaims. A request without claims, or
// without that claim, has an empty key: it is the authentication layer's job
// to reject unauthenticated requests, and FirstOf(JWTClaim("sub"),
// ClientIP(...)) limits anonymous ones by address. Strings are used as they
// are; numbers and other values in their JSON form.
func JWTClaim(name string) KeyFunc {
	return func(r *http.Request) string {
		claims, ok := ClaimsFrom(r.Context())
		if !ok {
			return ""
		}
		switch v := claims[name].(type) {
		case nil:
			return ""
		case string:
			return v
		case json.Number:
			return v.String()
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		default:
			b, err := json.Marshal(v)
			if err != nil {
				return ""
			}
			return string(b)
		}
	}
}
