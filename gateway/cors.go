package gateway

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/rs/cors"

	"github.com/sluicelabs/sluice/internal/accesslog"
)

// corsPolicy is the gateway's CORS handling: rs/cors's, with a preflight's
// requested headers read as any client may write them, and refusals logged.
type corsPolicy struct {
	cors    *cors.Cors
	methods []string
	headers []string
	log     *slog.Logger
	// throttle bounds the refusal lines: whoever sends preflights decides
	// how many there are.
	throttle *accesslog.Throttle
}

func newCORSPolicy(c *CORSConfig, log *slog.Logger) *corsPolicy {
	methods := c.AllowedMethods
	if len(methods) == 0 {
		methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	headers := c.AllowedHeaders
	if len(headers) == 0 {
		headers = []string{"Authorization", "Content-Type"}
	}
	return &corsPolicy{cors: newCORS(c, methods, headers), methods: methods, headers: headers, log: log, throttle: accesslog.NewThrottle()}
}

// Handler answers preflights and adds CORS headers to the answers of next.
func (p *corsPolicy) Handler(next http.Handler) http.Handler {
	inner := p.cors.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodOptions || r.Header.Get("Origin") == "" || r.Header.Get("Access-Control-Request-Method") == "" {
			inner.ServeHTTP(w, r)
			return
		}
		// Browsers send the requested headers lowercase, sorted and without
		// spaces, which is all rs/cors accepts; curl, scripts and some
		// proxies write "Authorization, Content-Type". Same meaning.
		if v := r.Header.Values("Access-Control-Request-Headers"); len(v) > 0 {
			r.Header.Set("Access-Control-Request-Headers", normaliseHeaderList(v))
		}
		inner.ServeHTTP(w, r)
		if w.Header().Get("Access-Control-Allow-Origin") == "" {
			p.logRefusal(r)
		}
	})
}

// normaliseHeaderList is a list of field names as a browser writes it:
// lowercase, sorted, without duplicates, joined by commas without spaces.
func normaliseHeaderList(values []string) string {
	var names []string
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// logRefusal says why a preflight got no grant, so an operator whose
// browser calls fail can tell which setting to change.
func (p *corsPolicy) logRefusal(r *http.Request) {
	ok, suppressed := p.throttle.Allow()
	if !ok {
		return
	}
	reason := "origin not in cors.allowed_origins"
	if p.cors.OriginAllowed(r) {
		method := r.Header.Get("Access-Control-Request-Method")
		if !slices.ContainsFunc(p.methods, func(m string) bool { return strings.EqualFold(m, method) }) {
			reason = "method " + method + " not in cors.allowed_methods"
		} else {
			var missing []string
			for _, h := range strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",") {
				if h != "" && !slices.ContainsFunc(p.headers, func(a string) bool { return strings.EqualFold(a, h) }) {
					missing = append(missing, h)
				}
			}
			reason = "headers " + strings.Join(missing, ", ") + " not in cors.allowed_headers"
		}
	}
	attrs := []slog.Attr{
		slog.String("api", "gateway"),
		slog.String("origin", r.Header.Get("Origin")),
		slog.String("reason", reason),
		slog.String("remote", accesslog.PeerIP(r)),
		slog.Int("suppressed_before", suppressed),
	}
	p.log.LogAttrs(r.Context(), slog.LevelInfo, "CORS preflight refused", attrs...)
}
