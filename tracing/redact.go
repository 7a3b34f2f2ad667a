package tracing

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Redacted replaces a query parameter's value in an exported URL, as the
// OpenTelemetry semantic conventions for url.full and url.query say.
const Redacted = "REDACTED"

// A span is redacted on its way out, whoever made it (this package's
// wrappers, the gRPC and HTTP instrumentation, a library): query strings
// carry API keys and tokens (?api_key=, ?token=), and Sluice's paths carry
// subjects and hold ids (/v1/tenants/acme/rules/pay/subjects/alice@x.com),
// which the access log keeps out for the same reason. The HTTP
// instrumentation records both at the start of a request, before routing,
// so they are rewritten here rather than at the source.

// redactingExporter hands its exporter each span with its URLs redacted.
type redactingExporter struct{ sdktrace.SpanExporter }

// Redacting wraps exporter so that no span it exports carries a query
// parameter's value or a server's raw request path: url.full and url.query
// keep their parameter names with each value REDACTED (and url.full loses
// its user info); a server span's url.path becomes its http.route (the
// route pattern) or goes when none matched; the pre-1.20 http.target and
// http.url go the same way; and error texts in the status and in events
// lose the query strings of any URL they quote. Setup uses it; a process
// that builds its own provider should too.
func Redacting(exporter sdktrace.SpanExporter) sdktrace.SpanExporter {
	return redactingExporter{exporter}
}

func (e redactingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redactSpan(s)
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// redactedSpan is a span with some of its fields replaced; embedding the
// original keeps every other field (and the interface's private method).
type redactedSpan struct {
	sdktrace.ReadOnlySpan
	attributes []attribute.KeyValue
	status     sdktrace.Status
	events     []sdktrace.Event
}

func (s redactedSpan) Attributes() []attribute.KeyValue { return s.attributes }
func (s redactedSpan) Status() sdktrace.Status          { return s.status }
func (s redactedSpan) Events() []sdktrace.Event         { return s.events }

func redactSpan(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	attrs := s.Attributes()
	route := ""
	for _, kv := range attrs {
		if kv.Key == semconv.HTTPRouteKey {
			route = kv.Value.AsString()
		}
	}
	server := s.SpanKind() == trace.SpanKindServer
	redacted := make([]attribute.KeyValue, 0, len(attrs))
	for _, kv := range attrs {
		switch kv.Key {
		case semconv.URLFullKey, "http.url":
			kv.Value = attribute.StringValue(redactURL(kv.Value.AsString()))
		case semconv.URLQueryKey:
			kv.Value = attribute.StringValue(redactQuery(kv.Value.AsString()))
		case semconv.URLPathKey, "http.target":
			if !server && kv.Key == semconv.URLPathKey {
				break // a client's own request path: the upstream's, as it asked
			}
			if route == "" {
				continue
			}
			kv = semconv.URLPath(route)
		default:
			if kv.Value.Type() == attribute.STRING && strings.HasPrefix(string(kv.Key), "exception.") {
				kv.Value = attribute.StringValue(redactText(kv.Value.AsString()))
			}
		}
		redacted = append(redacted, kv)
	}
	status := s.Status()
	status.Description = redactText(status.Description)
	events := s.Events()
	if len(events) > 0 {
		events = append([]sdktrace.Event(nil), events...)
		for i := range events {
			ev := append([]attribute.KeyValue(nil), events[i].Attributes...)
			for j, kv := range ev {
				if kv.Value.Type() == attribute.STRING {
					ev[j].Value = attribute.StringValue(redactText(kv.Value.AsString()))
				}
			}
			events[i].Attributes = ev
		}
	}
	return redactedSpan{ReadOnlySpan: s, attributes: redacted, status: status, events: events}
}

// redactURL keeps a URL's scheme, host, path and the names of its query
// parameters; every value is REDACTED and user info is dropped. What does
// not parse is cut at its query.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.IndexByte(raw, '?'); i >= 0 {
			return raw[:i+1] + Redacted
		}
		return raw
	}
	u.User = nil
	u.RawQuery = redactQuery(u.RawQuery)
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// redactQuery replaces each parameter's value with REDACTED, keeping the
// names (which say what was asked, and are not secret) and their order.
func redactQuery(query string) string {
	if query == "" {
		return ""
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		parts[i] = name + "=" + Redacted
	}
	return strings.Join(parts, "&")
}

// queryInText is the query string of a URL quoted in an error message, such
// as net/http's `Get "http://upstream/x?token=...": dial tcp ...`.
var queryInText = regexp.MustCompile(`\?[^\s"'<>]*`)

func redactText(s string) string {
	if !strings.Contains(s, "?") {
		return s
	}
	return queryInText.ReplaceAllString(s, "?"+Redacted)
}

// recordRoute gives the request's server span its route, once the mux has
// matched one: http.route as the semantic conventions define it (the path
// template, without the method the pattern may start with), which the
// exporter then also puts in url.path in place of the raw path.
func recordRoute(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.Pattern == "" {
			return
		}
		trace.SpanFromContext(r.Context()).SetAttributes(semconv.HTTPRoute(routeTemplate(r.Pattern)))
	})
}

// routeTemplate is a ServeMux pattern's path: "POST /v1/check" is
// "/v1/check", "example.com/x/{id}" is "/x/{id}".
func routeTemplate(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = path
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:]
	}
	return pattern
}
