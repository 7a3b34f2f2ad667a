package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/felixge/httpsnoop"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelabs/sluice/internal/accesslog"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/middleware"
)

// statusWriter records the status of an answer for the route's metrics.
type statusWriter struct{ status int }

// wrap returns w recording its status; the result keeps w's optional
// interfaces (Flusher for streamed answers, Hijacker for upgrades).
func (s *statusWriter) wrap(w http.ResponseWriter) http.ResponseWriter {
	return httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) {
				if s.status == 0 && code >= 200 {
					s.status = code
				}
				next(code)
			}
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) {
				if s.status == 0 {
					s.status = http.StatusOK
				}
				return next(b)
			}
		},
	})
}

// code is the recorded status: 200 when the handler wrote nothing, as
// net/http then answers.
func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// attrRoute names the gateway route on a request's span.
const attrRoute = attribute.Key("sluice.gateway.route")

// nameSpan names the request's server span after its route (bounded, unlike
// the path). Without tracing the span does not record and this is free.
func nameSpan(r *http.Request, rte *route) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	span.SetName(r.Method + " " + rte.cfg.PathPrefix)
	span.SetAttributes(attrRoute.String(rte.cfg.Name))
}

// exchange is what the access log learns of a request on its way through:
// the route that matched, what its limits counted by, whether the limits
// were checked and the upstream reached, and how long the upstream took.
// The access log puts it in the request's context; without it nothing is
// recorded.
type exchange struct {
	route    string
	keyKind  string
	checked  bool
	proxied  bool
	upstream time.Duration
}

type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// Decisions of the access log: the route's limits let the request through
// (or failed open), denied it, or could not decide and refused it.
const (
	decisionAllow = "allow"
	decisionDeny  = "deny"
	decisionError = "error"
)

// accessLog wraps a runtime's handler so that each request is one record,
// message "access": its route's name (never the path or query, which hold
// identifiers), method, status, durations, what the limits counted by (the
// kind, never the value), their decision, and the trace ID when traced.
// Answers of 400 and above are always logged, others sampled at sample.
func accessLog(h http.Handler, log *slog.Logger, sample float64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ex := &exchange{}
		r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
		sw := &statusWriter{}
		h.ServeHTTP(sw.wrap(w), r)
		status := sw.code()
		if status < 400 && !accesslog.Keep(sample) {
			return
		}
		route := ex.route
		if route == "" {
			route = metrics.RouteUnmatched
		}
		attrs := make([]slog.Attr, 0, 10)
		attrs = append(attrs,
			slog.String("route", route),
			slog.String("method", r.Method),
			slog.Int("status", status),
			slog.Float64("duration_ms", accesslog.Milliseconds(time.Since(start))),
		)
		if ex.proxied {
			attrs = append(attrs, slog.Float64("upstream_ms", accesslog.Milliseconds(ex.upstream)))
		}
		if ex.keyKind != "" {
			attrs = append(attrs, slog.String("key", ex.keyKind))
		}
		if ex.checked {
			decision := decisionError
			switch {
			case ex.proxied:
				decision = decisionAllow
			case status == http.StatusTooManyRequests:
				decision = decisionDeny
			}
			attrs = append(attrs, slog.String("decision", decision))
		}
		if status < 400 {
			attrs = append(attrs, slog.Float64("sampled", sample))
		}
		attrs = accesslog.AppendTrace(r.Context(), attrs)
		log.LogAttrs(r.Context(), slog.LevelInfo, accesslog.Message, attrs...)
	})
}

// notedKey is key, noting in the request's exchange that kind is what the
// limits counted by when key yields one.
func notedKey(key middleware.KeyFunc, kind string) middleware.KeyFunc {
	return func(r *http.Request) string {
		k := key(r)
		if k != "" {
			if ex := exchangeFrom(r.Context()); ex != nil {
				ex.keyKind = kind
			}
		}
		return k
	}
}

// authFailureLog logs refused credentials, at most accesslog.ThrottleBurst
// per accesslog.ThrottleWindow for the whole gateway (an attacker controls
// how many there are), each saying how many were left out before it.
// Records say where the credential was and why it was refused, never the
// token, the key or any part of them.
type authFailureLog struct {
	log      *slog.Logger
	throttle *accesslog.Throttle
}

func (l *authFailureLog) record(r *http.Request, rte *route, reason string) {
	ok, suppressed := l.throttle.Allow()
	if !ok {
		return
	}
	attrs := []slog.Attr{
		slog.String("api", "gateway"),
		slog.String("route", rte.cfg.Name),
		slog.String("method", r.Method),
		slog.String("reason", reason),
		slog.String("credential", credentialKind(r)),
		slog.String("remote", accesslog.PeerIP(r)),
		slog.Int("suppressed_before", suppressed),
	}
	attrs = accesslog.AppendTrace(r.Context(), attrs)
	l.log.LogAttrs(r.Context(), slog.LevelWarn, "authentication failed", attrs...)
}

// credentialKind names what the caller presented, never its value.
func credentialKind(r *http.Request) string {
	h := r.Header.Get("Authorization")
	switch {
	case h == "":
		return "none"
	case len(h) > len("Bearer ") && strings.EqualFold(h[:len("Bearer ")], "Bearer "):
		return "bearer"
	}
	return "authorization"
}
