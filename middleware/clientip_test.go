package middleware_test

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/middleware"
)

func TestClientIP(t *testing.T) {
	lb := mustCIDRs(t, "10.0.0.0/8", "fd00::/8")
	tests := []struct {
		name    string
		trusted middleware.TrustedProxies
		remote  string
		headers map[string][]string
		want    string
	}{
		{"no_proxies_trusted_uses_peer_and_ignores_spoofed_xff", middleware.TrustedProxies{}, "203.0.113.7:5555",
			map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}, "203.0.113.7"},
		{"untrusted_peer_spoofing_xff_is_ignored", middleware.TrustedProxies{CIDRs: lb}, "198.51.100.9:5555",
			map[string][]string{"X-Forwarded-For": {"10.0.0.1"}}, "198.51.100.9"},
		{"trusted_peer_gives_rightmost_untrusted_hop", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7, 10.1.1.1"}}, "203.0.113.7"},
		{"every_hop_trusted_gives_leftmost", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"10.9.9.9, 10.1.1.1"}}, "10.9.9.9"},
		{"trusted_peer_without_header_is_the_client", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			nil, "10.0.0.2"},
		{"repeated_xff_lines_are_one_list", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6", "203.0.113.7, 10.1.1.1"}}, "203.0.113.7"},
		{"one_hop_trusts_only_the_peer", middleware.TrustedProxies{Hops: 1}, "192.0.2.1:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7"}}, "203.0.113.7"},
		{"two_hops", middleware.TrustedProxies{Hops: 2}, "192.0.2.1:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, 203.0.113.7, 192.0.2.2"}}, "203.0.113.7"},
		{"hops_bound_cidr_trust", middleware.TrustedProxies{CIDRs: lb, Hops: 1}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, 10.1.1.1"}}, "10.1.1.1"},
		{"xff_entry_with_port", middleware.TrustedProxies{Hops: 1}, "192.0.2.1:80",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7:4711"}}, "203.0.113.7"},
		{"garbage_hop_stops_at_last_trusted_address", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6, not-an-ip"}}, "10.0.0.2"},
		{"forwarded_is_ignored_when_proxies_write_xff", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {"for=6.6.6.6"}, "X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"forwarded_for_with_other_params", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {"for=192.0.2.60;proto=http;by=203.0.113.43"}}, "192.0.2.60"},
		{"forwarded_quoted_ipv6_with_port", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {`For="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::/64"},
		{"forwarded_rightmost_untrusted_element", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {`for=6.6.6.6, for="203.0.113.7";proto=https`, "for=10.1.1.1"}}, "203.0.113.7"},
		{"forwarded_unknown_stops_at_trusted_hop", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {"for=6.6.6.6, for=unknown"}}, "10.0.0.2"},
		// The client sent `for=1.2.3.4;x="`; the proxy appended its peer.
		{"forwarded_open_quote_cannot_swallow_what_proxies_append", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {`for=1.2.3.4;x=", for=203.0.113.7`}}, "203.0.113.7"},
		{"forwarded_open_quote_cannot_hide_a_proxied_ipv6_client", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {`for=1.2.3.4;x="\, for="[2001:db8::7]:4711", for=10.1.1.1`}}, "2001:db8::/64"},
		{"forwarded_quoted_comma_does_not_split", middleware.TrustedProxies{CIDRs: lb, Header: "forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {`for=203.0.113.7;ext="a,b"`}}, "203.0.113.7"},
		{"xff_ignored_when_proxies_write_forwarded", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"6.6.6.6"}}, "10.0.0.2"},
		{"ipv6_peer_is_its_64", middleware.TrustedProxies{}, "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443", nil, "2001:db8:1:2::/64"},
		{"ipv6_neighbours_in_one_64_share_a_key", middleware.TrustedProxies{}, "[2001:db8:1:2::1]:443", nil, "2001:db8:1:2::/64"},
		{"ipv4_mapped_ipv6_is_ipv4", middleware.TrustedProxies{}, "[::ffff:203.0.113.7]:443", nil, "203.0.113.7"},
		{"trusted_ipv6_proxy", middleware.TrustedProxies{CIDRs: lb}, "[fd00::1]:443",
			map[string][]string{"X-Forwarded-For": {"2001:db8:9:9::5"}}, "2001:db8:9:9::/64"},
		{"unparsable_remote_addr_has_no_key", middleware.TrustedProxies{}, "pipe", nil, ""},
		{"ipv4_mapped_cidr_trusts_the_ipv4_peer", middleware.TrustedProxies{CIDRs: mustCIDRs(t, "::ffff:10.0.0.0/104")}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"ipv4_mapped_peer_matches_ipv4_cidr", middleware.TrustedProxies{CIDRs: lb}, "[::ffff:10.0.0.2]:80",
			map[string][]string{"X-Forwarded-For": {"::ffff:203.0.113.7"}}, "203.0.113.7"},
		{"forwarded_obfuscated_identifier_stops_at_trusted_hop", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {"for=6.6.6.6, for=_hidden"}}, "10.0.0.2"},
		{"forwarded_element_without_for_stops_the_walk", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {"for=6.6.6.6, proto=https"}}, "10.0.0.2"},
		{"forwarded_unbracketed_quoted_ipv6", middleware.TrustedProxies{CIDRs: lb, Header: "Forwarded"}, "10.0.0.2:80",
			map[string][]string{"Forwarded": {`for="2001:db8:cafe::17"`}}, "2001:db8:cafe::/64"},
		{"empty_xff_from_trusted_peer_is_the_peer", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {""}}, "10.0.0.2"},
		{"spoofed_trusted_looking_entry_left_of_client_is_not_reached", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			map[string][]string{"X-Forwarded-For": {"10.6.6.6, 203.0.113.7"}}, "203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for k, vs := range tt.headers {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			if got := middleware.ClientIP(tt.trusted)(r); got != tt.want {
				t.Fatalf("ClientIP = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTrustedChain(t *testing.T) {
	lb := mustCIDRs(t, "10.0.0.0/8")
	tests := []struct {
		name    string
		trusted middleware.TrustedProxies
		remote  string
		xff     string
		want    string
	}{
		{"untrusted_peer_is_the_whole_chain", middleware.TrustedProxies{CIDRs: lb}, "198.51.100.9:1", "6.6.6.6", "198.51.100.9"},
		{"trusted_hops_follow_the_client_and_spoofed_entries_are_dropped", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80",
			"6.6.6.6, 203.0.113.7, 10.1.1.1", "203.0.113.7, 10.1.1.1, 10.0.0.2"},
		{"hop_count", middleware.TrustedProxies{Hops: 2}, "192.0.2.1:80", "6.6.6.6, 203.0.113.7, 192.0.2.2", "203.0.113.7, 192.0.2.2, 192.0.2.1"},
		{"every_hop_trusted", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80", "10.9.9.9, 10.1.1.1", "10.9.9.9, 10.1.1.1, 10.0.0.2"},
		{"garbage_stops_at_the_last_trusted_hop", middleware.TrustedProxies{CIDRs: lb}, "10.0.0.2:80", "6.6.6.6, unknown, 10.1.1.1", "10.1.1.1, 10.0.0.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			r.Header.Set("X-Forwarded-For", tt.xff)
			chain, ok := tt.trusted.Chain(r)
			if !ok {
				t.Fatal("no chain")
			}
			got := make([]string, len(chain))
			for i, a := range chain {
				got[i] = a.String()
			}
			if strings.Join(got, ", ") != tt.want {
				t.Fatalf("Chain = %v, want %s", got, tt.want)
			}
			if client, _ := tt.trusted.ClientAddr(r); client != chain[0] {
				t.Fatalf("ClientAddr %v is not the chain's first entry %v", client, chain[0])
			}
		})
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := middleware.ParseCIDRs([]string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32", "10.0.0.0/8"}
	for i := range want {
		if got[i].String() != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := middleware.ParseCIDRs([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("want an error for a bad network")
	}
}

func TestTrustedProxiesValidate(t *testing.T) {
	if err := (middleware.TrustedProxies{Header: "X-Real-IP"}).Validate(); err == nil {
		t.Fatal("want an error for an unsupported header")
	}
	if err := (middleware.TrustedProxies{Hops: -1}).Validate(); err == nil {
		t.Fatal("want an error for negative hops")
	}
	if err := (middleware.TrustedProxies{Header: "forwarded", Hops: 1}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func mustCIDRs(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := middleware.ParseCIDRs(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
