package gateway

import (
	"net/http"

	"github.com/felixge/httpsnoop"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
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
