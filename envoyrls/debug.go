package envoyrls

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// ServeDebug serves GET /rlconfig (ConfigDumpHandler) on a listener of its
// own at addr (--debug-addr), apart from every other listener as in
// envoyproxy/ratelimit, over TLS when tls is set. Close the server to stop.
func (s *Server) ServeDebug(ctx context.Context, addr string, tls *tlsconfig.Reloader) (*http.Server, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the debug listener on --debug-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /rlconfig", s.ConfigDumpHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsconfig.HTTPConfig(tls),
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	go func() { _ = tlsconfig.ServeHTTP(srv, lis) }()
	s.log.Info("debug listener serving /rlconfig", "addr", lis.Addr().String(), "tls", tlsconfig.Mode(tls))
	return srv, nil
}

// Dump lists every rate limit of c, one per line, in envoyproxy/ratelimit's
// /rlconfig form: "domain.key_value.key: unit=MINUTE requests_per_unit=10,
// shadow_mode: false, quota_mode: false", sorted so two dumps of one
// configuration compare equal. An unlimited rule shows unit=UNKNOWN
// requests_per_unit=0, as there.
func (c *Config) Dump() string {
	if c == nil {
		return ""
	}
	type line struct{ key, text string }
	var lines []line
	for _, name := range c.Domains() {
		d := c.domains[name]
		for _, r := range d.Rules() {
			unit, perUnit := "UNKNOWN", uint32(0)
			if !r.Unlimited {
				unit, perUnit = r.Unit.String(), r.RequestsPerUnit
			}
			key := fullKey(d.Name, r.Path)
			lines = append(lines, line{key, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n", key, unit, perUnit, r.Shadow, r.QuotaMode)})
		}
	}
	// By key, so a descriptor comes before those nested in it.
	sort.Slice(lines, func(i, j int) bool { return lines[i].key < lines[j].key })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
	}
	return b.String()
}

// fullKey turns a rule path ("database=users.user_id", escaped segments
// joined by '.') into envoyproxy/ratelimit's key of the same descriptor
// ("domain.database_users.user_id").
func fullKey(domain, path string) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, segment := range strings.Split(path, ".") {
		b.WriteByte('.')
		key, value, hasValue := strings.Cut(segment, "=")
		b.WriteString(unescapePath(key))
		if hasValue {
			b.WriteByte('_')
			b.WriteString(unescapePath(value))
		}
	}
	return b.String()
}

// unescapePath undoes escapePath; a segment it cannot read is shown as is.
func unescapePath(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// ConfigDumpHandler serves Dump of the configuration in force as text, as
// envoyproxy/ratelimit's debug listener does at /rlconfig. It shows limits,
// never counters or request data, but belongs on a private listener all the
// same: it tells a caller which descriptors are limited and how much.
func (s *Server) ConfigDumpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(s.Config().Dump()))
	})
}
