package middleware

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// TrustedProxies says which hops in front of the application may be believed
// about the client's address.
//
// The request's peer (RemoteAddr) is hop 1; each address a trusted hop
// reports (the right-most remaining entry of X-Forwarded-For, or of the
// Forwarded header's for= parameters) is the next hop. A hop is trusted when
// its address is in CIDRs (if any are given) and it is one of the first Hops
// hops (if Hops is not zero). The client is the first hop that is not trusted,
// or the left-most address when every hop is. With no CIDRs and Hops zero,
// nothing is trusted and the client is always RemoteAddr: a header a client
// sends itself is never believed.
type TrustedProxies struct {
	// CIDRs are the networks of your proxies and load balancers, such as
	// 10.0.0.0/8. Single addresses are written as /32 or /128.
	CIDRs []netip.Prefix
	// Hops is how many proxies stand in front of the application, counting
	// the one that connects to it.
	Hops int
	// Header is the header the proxies append to: "X-Forwarded-For" (the
	// default) or "Forwarded" (RFC 7239). Only that one is read: believing a
	// header your proxies do not write would let clients choose their address.
	Header string
}

// ParseCIDRs parses networks such as "10.0.0.0/8" and single addresses such as
// "192.0.2.1" (taken as /32 or /128), for TrustedProxies.CIDRs.
func ParseCIDRs(values []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(values))
	for _, v := range values {
		v = strings.TrimSpace(v)
		if p, err := netip.ParsePrefix(v); err == nil {
			// Addresses are unmapped before they are compared, so an
			// IPv4-mapped network (::ffff:10.0.0.0/104) must be written as
			// the IPv4 network it means, or it would never match.
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a network like 10.0.0.0/8 nor an IP address", v)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Validate reports what is wrong with t.
func (t TrustedProxies) Validate() error {
	if t.Hops < 0 {
		return fmt.Errorf("trusted proxy hops must not be negative, got %d", t.Hops)
	}
	switch http.CanonicalHeaderKey(t.Header) {
	case "", "X-Forwarded-For", "Forwarded":
		return nil
	}
	return fmt.Errorf("trusted proxy header must be X-Forwarded-For or Forwarded, got %q", t.Header)
}

// ClientIP keys requests by the client's IP address, found through trusted.
// IPv4 addresses are used as they are; an IPv6 address is reduced to its /64
// network ("2001:db8:1:2::/64"), since one subscriber usually holds a whole
// /64 and could otherwise rotate addresses to dodge the limit.
func ClientIP(trusted TrustedProxies) KeyFunc {
	return func(r *http.Request) string {
		a, ok := trusted.ClientAddr(r)
		if !ok {
			return ""
		}
		return addrKey(a)
	}
}

// ClientAddr returns the client address of r as t defines it, false if even
// RemoteAddr is not an IP address.
func (t TrustedProxies) ClientAddr(r *http.Request) (netip.Addr, bool) {
	path, ok := t.walk(r)
	if !ok {
		return netip.Addr{}, false
	}
	return path[len(path)-1], true
}

// Chain returns the part of r's path that t can vouch for, client first: the
// client as ClientAddr finds it, then each trusted hop that reported the one
// before it, ending with the peer (RemoteAddr). Entries left of the client
// were written by the client itself and are left out. A proxy that forwards r
// sends this as its X-Forwarded-For, so the next application finds the same
// client by trusting the proxy and the hops in front of it.
func (t TrustedProxies) Chain(r *http.Request) ([]netip.Addr, bool) {
	path, ok := t.walk(r)
	if !ok {
		return nil, false
	}
	slices.Reverse(path)
	return path, true
}

// TrustsPeer reports whether r's peer (RemoteAddr) is a trusted proxy, whose
// other X-Forwarded-* headers (such as the scheme it was reached by) may be
// believed too.
func (t TrustedProxies) TrustsPeer(r *http.Request) bool {
	peer, ok := parseHostAddr(r.RemoteAddr)
	return ok && t.trusts(peer, 1)
}

// walk follows r's hops from the peer leftwards while they are trusted and
// returns them in that order (peer first, client last).
func (t TrustedProxies) walk(r *http.Request) ([]netip.Addr, bool) {
	peer, ok := parseHostAddr(r.RemoteAddr)
	if !ok {
		return nil, false
	}
	path := []netip.Addr{peer}
	if !t.trusts(peer, 1) {
		return path, true
	}
	var chain []string
	if http.CanonicalHeaderKey(t.Header) == "Forwarded" {
		chain = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		chain = forwardedList(r.Header.Values("X-Forwarded-For"))
	}
	for i := len(chain) - 1; i >= 0; i-- {
		a, ok := parseHostAddr(chain[i])
		if !ok {
			// A trusted hop reported something that is not an address
			// ("unknown", an obfuscated name): the last address we can
			// vouch for is that hop itself.
			return path, true
		}
		path = append(path, a)
		if !t.trusts(a, len(path)) {
			return path, true
		}
	}
	return path, true
}

func (t TrustedProxies) trusts(a netip.Addr, hop int) bool {
	if len(t.CIDRs) == 0 && t.Hops == 0 {
		return false
	}
	if t.Hops > 0 && hop > t.Hops {
		return false
	}
	if len(t.CIDRs) == 0 {
		return true
	}
	for _, p := range t.CIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func addrKey(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// parseHostAddr reads an address with or without port or brackets:
// "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80". IPv4-mapped
// IPv6 addresses become IPv4, and zones are dropped.
func parseHostAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// forwardedList splits X-Forwarded-For values, in order, across repeated
// header lines.
func forwardedList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(part))
		}
	}
	return out
}

// forwardedFor returns the for= parameter of each element of RFC 7239
// Forwarded values, in order; an element without for= gives "" (not an
// address), so it stops the walk rather than being skipped over.
//
// A value that ends inside a quoted string is split at every ',' and ';',
// quotes or not. The client writes the start of the value and proxies append
// to it: an open quote the client leaves would otherwise swallow what the
// proxies append ("for=1.2.3.4;x=\"" + ", for=<real address>"), and the
// client would choose its own address. Proxies write no '\' and an even
// number of quotes, so the value ends quoted exactly when the client's part
// does.
func forwardedFor(values []string) []string {
	var out []string
	for _, v := range values {
		split := splitQuoted
		if endsQuoted(v) {
			split = func(s string, sep byte) []string { return strings.Split(s, string(sep)) }
		}
		for _, element := range split(v, ',') {
			element = strings.TrimSpace(element)
			if element == "" {
				continue
			}
			forValue := ""
			for _, pair := range split(element, ';') {
				name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
					forValue = unquote(strings.TrimSpace(value))
				}
			}
			out = append(out, forValue)
		}
	}
	return out
}

// splitQuoted splits s at sep outside double-quoted strings.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start := 0
	scanQuoted(s, func(i int) {
		if s[i] == sep {
			parts = append(parts, s[start:i])
			start = i + 1
		}
	})
	return append(parts, s[start:])
}

// endsQuoted reports whether s ends inside a double-quoted string.
func endsQuoted(s string) bool { return scanQuoted(s, func(int) {}) }

// scanQuoted calls outside with the index of each byte of s that is not in a
// double-quoted string (nor one of its quotes), and reports whether s ends
// inside one.
func scanQuoted(s string, outside func(i int)) (quoted bool) {
	escaped := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted:
			outside(i)
		}
	}
	return quoted
}

func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	var b strings.Builder
	escaped := false
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		if !escaped && c == '\\' {
			escaped = true
			continue
		}
		escaped = false
		b.WriteByte(c)
	}
	return b.String()
}
