// Package tracing sets up OpenTelemetry tracing for Sluice's processes and
// wraps their listeners and clients with it.
//
// Tracing is off unless the standard OTLP exporter variables are set
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Off,
// Setup returns a Tracing whose wrappers return what they are given
// unchanged and whose TracerProvider is nil, so the check path pays nothing
// for it: no span, no propagation, no wrapped response writer.
//
// On, spans are exported over OTLP, gRPC or HTTP/protobuf as
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL say
// (default http/protobuf, as the OpenTelemetry specification says), and the
// exporters read the other standard variables themselves (headers,
// certificates, timeouts, OTEL_EXPORTER_OTLP_INSECURE); OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER apply as usual. W3C trace
// context (traceparent, tracestate) and baggage are taken from callers and
// passed on to upstreams.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Tracing is the tracing of one process. The zero value and a nil
// *Tracing are off.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	propagator propagation.TextMapPropagator
	// Protocol and Endpoint say, for the start log, where spans go.
	Protocol, Endpoint string
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// TracerProvider returns the provider spans are made by; nil when tracing is
// off, which is what check.Options and the gateway take to mean off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.Enabled() {
		return nil
	}
	return t.provider
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Configured reports whether the environment asks for tracing.
func Configured() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup starts tracing for the process named service (the default of
// service.name) when the environment asks for it, and returns an off
// Tracing otherwise. An OTEL_SDK_DISABLED=true turns it off too.
func Setup(ctx context.Context, service, version string) (*Tracing, error) {
	if !Configured() || strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return &Tracing{}, nil
	}
	protocol := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	if protocol == "" {
		protocol = "http/protobuf"
	}
	var client otlptrace.Client
	switch protocol {
	case "grpc":
		client = otlptracegrpc.NewClient()
	case "http/protobuf":
		client = otlptracehttp.NewClient()
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported: use grpc or http/protobuf", protocol)
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("start the OTLP trace exporter: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = exporter.Shutdown(ctx)
		}
	}()
	// The environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) wins
	// over the defaults given here.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(Redacting(exporter)), sdktrace.WithResource(res))
	t := New(provider)
	// Libraries that trace through the globals (the gRPC and HTTP
	// instrumentation's defaults) use the same provider and propagator.
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(t.propagator)
	t.Protocol = protocol
	t.Endpoint = redactEndpoint(firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
	ok = true
	return t, nil
}

// New returns a Tracing over provider, propagating W3C trace context and
// baggage; for a process that builds its own provider (and tests).
func New(provider *sdktrace.TracerProvider) *Tracing {
	return &Tracing{
		provider:   provider,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// redactEndpoint drops credentials from an endpoint URL, so it can be logged.
func redactEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.User == nil {
		return endpoint
	}
	u.User = nil
	return u.String()
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// Handler wraps a server's handler: each request gets a server span named
// after the route pattern that served it, with that route as http.route,
// child of the caller's trace context when the request carries one. Off,
// it returns h.
func (t *Tracing) Handler(h http.Handler, server string) http.Handler {
	if !t.Enabled() {
		return h
	}
	return otelhttp.NewHandler(recordRoute(h), server,
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithSpanNameFormatter(spanName),
	)
}

// spanName names a server span by the pattern that matched (bounded, unlike
// the path); the pattern is known only once the mux has routed, so until
// then the method stands in, as the semantic conventions allow.
func spanName(_ string, r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method
}

// Transport wraps a client transport: each request gets a client span and
// carries the current trace context upstream (traceparent, tracestate).
// Off, it returns rt.
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	if !t.Enabled() {
		return rt
	}
	return otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
	)
}

// GRPCServerOptions are the options that give each gRPC call a server span,
// child of the caller's trace context from the call's metadata. Off, none.
func (t *Tracing) GRPCServerOptions() []grpc.ServerOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(t.propagator),
	))}
}
