package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicelabs/sluice/middleware"
)

func TestKeyFuncs(t *testing.T) {
	withClaims := func(claims map[string]any) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		return r.WithContext(middleware.WithClaims(r.Context(), claims))
	}
	withHeader := func(k, v string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(k, v)
		return r
	}
	fixed := func(s string) middleware.KeyFunc {
		return middleware.Func(func(*http.Request) string { return s })
	}
	plain := httptest.NewRequest("GET", "/", nil)
	tests := []struct {
		name string
		key  middleware.KeyFunc
		r    *http.Request
		want string
	}{
		{"header_value", middleware.Header("x-api-key"), withHeader("X-API-Key", " k1 "), "k1"},
		{"missing_header_is_empty", middleware.Header("X-API-Key"), plain, ""},
		{"jwt_string_claim", middleware.JWTClaim("sub"), withClaims(map[string]any{"sub": "user-42"}), "user-42"},
		{"jwt_number_claim", middleware.JWTClaim("uid"), withClaims(map[string]any{"uid": 12345678.0}), "12345678"},
		{"jwt_list_claim_as_json", middleware.JWTClaim("org"), withClaims(map[string]any{"org": []any{"a", "b"}}), `["a","b"]`},
		{"jwt_missing_claim_is_empty", middleware.JWTClaim("sub"), withClaims(map[string]any{"iss": "x"}), ""},
		{"no_claims_is_empty", middleware.JWTClaim("sub"), plain, ""},
		{"compose_joins_length_prefixed", middleware.Compose(fixed("a:b"), fixed("c")), plain, "3:a:b1:c"},
		{"compose_other_split_differs", middleware.Compose(fixed("a"), fixed("b:c")), plain, "1:a3:b:c"},
		{"compose_with_an_empty_part_is_empty", middleware.Compose(fixed("a"), fixed("")), plain, ""},
		{"first_of_takes_first_nonempty_tagged", middleware.FirstOf(fixed(""), fixed("203.0.113.7")), plain, "1:203.0.113.7"},
		{"first_of_user_and_ip_differ", middleware.FirstOf(fixed("203.0.113.7"), fixed("x")), plain, "0:203.0.113.7"},
		{"first_of_all_empty_is_empty", middleware.FirstOf(fixed(""), fixed("")), plain, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.key(tt.r); got != tt.want {
				t.Fatalf("key = %q, want %q", got, tt.want)
			}
		})
	}
}
