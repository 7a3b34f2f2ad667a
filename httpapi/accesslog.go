package httpapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/felixge/httpsnoop"

	"github.com/sluicelabs/sluice/internal/accesslog"
)

// AccessLogOptions configure AccessLog.
type AccessLogOptions struct {
	// Logger receives one record per request, message "access".
	Logger *slog.Logger
	// SampleAllowed is the fraction (0 to 1) of allowed checks logged.
	// Denials (429), errors (4xx, 5xx) and admin calls are always logged;
	// successful health, readiness and metrics probes never are.
	SampleAllowed float64
}

// routeCheck is the pattern of the check endpoint, whose allowed answers
// are sampled.
const routeCheck = "POST /v1/check"

// probes are answered too often, by machines, to be worth a record when
// they succeed.
var probes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true, "GET /healthcheck": true}

// AccessLog wraps h (whose ServeMux sets the request's Pattern) so that each
// request is one JSON record: method, route pattern (never the raw path,
// which can hold subjects), status, duration, bytes written, peer address,
// and the trace ID when the request is traced. Credentials and bodies are
// never logged.
func AccessLog(h http.Handler, opts AccessLogOptions) http.Handler {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	sample := min(max(opts.SampleAllowed, 0), 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m := httpsnoop.CaptureMetricsFn(w, func(w http.ResponseWriter) { h.ServeHTTP(w, r) })
		route := r.Pattern
		if m.Code < 300 {
			if probes[route] {
				return
			}
			if route == routeCheck && !accesslog.Keep(sample) {
				return
			}
		}
		if route == "" {
			route = "unmatched"
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs,
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.Int("status", m.Code),
			slog.Float64("duration_ms", accesslog.Milliseconds(time.Since(start))),
			slog.Int64("bytes", m.Written),
			slog.String("remote", accesslog.PeerIP(r)),
		)
		if route == routeCheck && m.Code < 300 {
			attrs = append(attrs, slog.Float64("sampled", sample))
		}
		attrs = accesslog.AppendTrace(r.Context(), attrs)
		log.LogAttrs(r.Context(), slog.LevelInfo, accesslog.Message, attrs...)
	})
}
