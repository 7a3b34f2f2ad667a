package middleware

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// FuzzClientAddr feeds arbitrary header values and peers to every kind of
// trust and checks what ClientAddr, Chain and ClientIP promise: the client is
// the peer or an address literally written in the header; every hop after the
// client in the chain is trusted (so nothing left of an untrusted hop is ever
// believed); addresses are unmapped and zoneless; an IPv6 key is its /64.
func FuzzClientAddr(f *testing.F) {
	f.Add("10.0.0.2:80", "6.6.6.6, 203.0.113.7, 10.1.1.1", "", uint8(0), uint8(0))
	f.Add("10.0.0.2:80", `for=6.6.6.6, for="203.0.113.7";proto=https`, "for=10.1.1.1", uint8(1), uint8(0))
	f.Add("[fd00::1]:443", `For="[2001:db8:cafe::17]:4711"`, "", uint8(1), uint8(0))
	f.Add("192.0.2.1:80", "6.6.6.6, 203.0.113.7, 192.0.2.2", "", uint8(0), uint8(2))
	f.Add("10.0.0.2:80", `for="\"1.2.3.4", for=unknown;x="a,b"`, `for=[::ffff:10.0.0.1]`, uint8(1), uint8(5))
	f.Add("[fe80::1%eth0]:80", "fe80::2%eth1, ::ffff:203.0.113.7:80", "[1.2.3.4]", uint8(0), uint8(3))
	f.Add("not-an-ip", "1.2.3.4", "", uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, remote, line1, line2 string, header, mode uint8) {
		tp := fuzzTrust(header, mode)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		name := "X-Forwarded-For"
		if tp.Header == "Forwarded" {
			name = "Forwarded"
		}
		r.Header.Add(name, line1)
		if line2 != "" {
			r.Header.Add(name, line2)
		}

		a, ok := tp.ClientAddr(r)
		peer, peerOK := parseHostAddr(remote)
		if ok != peerOK {
			t.Fatalf("ClientAddr ok = %v, but the peer %q parses: %v", ok, remote, peerOK)
		}
		key := ClientIP(tp)(r)
		if !ok {
			if key != "" {
				t.Fatalf("no client address, but key %q", key)
			}
			return
		}
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
			t.Fatalf("client address %v is not canonical", a)
		}
		if a != peer && !writtenIn(a, line1+"\n"+line2) {
			t.Fatalf("client %v is neither the peer %v nor written in %q / %q", a, peer, line1, line2)
		}
		if a.Is4() {
			if key != a.String() {
				t.Fatalf("key %q for IPv4 %v", key, a)
			}
		} else {
			p, err := netip.ParsePrefix(key)
			if err != nil || p.Bits() != 64 || p != p.Masked() || !p.Contains(a) {
				t.Fatalf("key %q for IPv6 %v is not its /64", key, a)
			}
		}

		chain, ok := tp.Chain(r)
		if !ok || len(chain) == 0 || chain[0] != a || chain[len(chain)-1] != peer {
			t.Fatalf("Chain = %v, %v; want the client %v first and the peer %v last", chain, ok, a, peer)
		}
		// chain[i] was reported by chain[i+1], which is hop len(chain)-i-1:
		// every reporter must be trusted.
		for i := 1; i < len(chain); i++ {
			if hop := len(chain) - i; !tp.trusts(chain[i], hop) {
				t.Fatalf("Chain %v believes %v, reported by untrusted hop %d (%v)", chain, chain[i-1], hop, chain[i])
			}
		}
		if tp.TrustsPeer(r) != (len(chain) > 1 || tp.trusts(peer, 1)) {
			t.Fatalf("TrustsPeer = %v for chain %v", tp.TrustsPeer(r), chain)
		}
	})
}

// FuzzClientAddrSpoof is the attack: the client writes whatever it likes as
// the header, then each trusted proxy appends the address it received from,
// to the same line or on a line of its own, as real proxies do. Whatever the
// client wrote, the client found must be its real address.
func FuzzClientAddrSpoof(f *testing.F) {
	f.Add("1.2.3.4", uint8(1), uint8(0), uint16(7))
	f.Add(`for=1.2.3.4;x="`, uint8(1), uint8(1), uint16(7))
	f.Add(`for=1.2.3.4, for="`, uint8(2), uint8(1), uint16(300))
	f.Add(`for="1.2.3.4\`, uint8(3), uint8(3), uint16(9))
	f.Add(`for=1.2.3.4;x="\`, uint8(2), uint8(5), uint16(1))
	f.Add("1.2.3.4, 10.0.0.9", uint8(2), uint8(4), uint16(65535))
	f.Add(`"`, uint8(1), uint8(7), uint16(2))
	f.Fuzz(func(t *testing.T, clientPart string, proxies, mode uint8, seed uint16) {
		n := int(proxies)%4 + 1
		forwarded := mode&1 != 0
		ownLines := mode&2 != 0 // each proxy adds its own header line
		byHops := mode&4 != 0   // trust by hop count instead of CIDRs
		v6 := seed&1 != 0

		client := netip.AddrFrom4([4]byte{203, 0, 113, byte(seed >> 8)})
		if v6 {
			client = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(seed >> 8), 1})
		}
		hops := []netip.Addr{client} // hops[i] is what proxy i+1 appends
		for i := 1; i <= n; i++ {
			hops = append(hops, netip.AddrFrom4([4]byte{10, 0, byte(i), byte(seed >> 4)}))
		}
		tp := TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		if byHops {
			tp = TrustedProxies{Hops: n}
		}
		name := "X-Forwarded-For"
		if forwarded {
			tp.Header, name = "Forwarded", "Forwarded"
		}

		lines := []string{clientPart}
		for _, h := range hops[:n] {
			entry := h.String()
			if forwarded {
				entry = "for=" + h.String()
				if h.Is6() {
					entry = fmt.Sprintf(`for="[%s]:%d"`, h, 1024+int(seed)%1000)
				}
			}
			if ownLines {
				lines = append(lines, entry)
			} else {
				lines[len(lines)-1] += ", " + entry
			}
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = netip.AddrPortFrom(hops[n], 443).String()
		for _, l := range lines {
			r.Header.Add(name, l)
		}
		got, ok := tp.ClientAddr(r)
		if !ok || got != client {
			t.Fatalf("client %v (%v); want the real client %v\n%s: %q\nfrom %v", got, ok, client, name, lines, hops[n])
		}
	})
}

// fuzzTrust picks a trust configuration.
func fuzzTrust(header, mode uint8) TrustedProxies {
	var tp TrustedProxies
	switch mode % 6 {
	case 1:
		tp.Hops = 1
	case 2:
		tp.Hops = 2
	case 3:
		tp.CIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	case 4:
		tp.CIDRs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		tp.Hops = 3
	case 5:
		tp.CIDRs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	if header%2 == 1 {
		tp.Header = "Forwarded"
	}
	return tp
}

// writtenIn reports whether a is spelled, in any accepted form, by some run
// of address characters in s. It does not share the parser under test.
func writtenIn(a netip.Addr, s string) bool {
	isAddrChar := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.'
	}
	for i := 0; i < len(s); i++ {
		if !isAddrChar(s[i]) {
			continue
		}
		for j := i + 1; j <= len(s); j++ {
			if j < len(s) && isAddrChar(s[j]) {
				continue
			}
			// Every sub-run, so "1.2.3.4:80" and "[::1]:80" count too.
			for k := i; k < j; k++ {
				for m := k + 1; m <= j && m-k <= 45; m++ { // 45: the longest address text
					if b, err := netip.ParseAddr(s[k:m]); err == nil && b.Unmap() == a {
						return true
					}
				}
			}
			i = j
			break
		}
	}
	return strings.Contains(s, a.String())
}
