package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/tracing"
)

// TestOffWithoutTheExporterVariables: with no OTLP endpoint in the
// environment, tracing is off and its wrappers hand back what they are
// given, so nothing is added to any request.
func TestOffWithoutTheExporterVariables(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := tracing.Setup(context.Background(), "sluice", "test")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() || tr.TracerProvider() != nil || tr.GRPCServerOptions() != nil {
		t.Fatal("tracing is on without an exporter endpoint")
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	rec := httptest.NewRecorder()
	tr.Handler(h, "x").ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rt := tr.Transport(http.DefaultTransport); rt != http.DefaultTransport {
		t.Error("the transport is wrapped while tracing is off")
	}
}

// TestSDKDisabledWins: OTEL_SDK_DISABLED=true turns tracing off even with
// an endpoint.
func TestSDKDisabledWins(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	tr, err := tracing.Setup(context.Background(), "sluice", "test")
	if err != nil || tr.Enabled() {
		t.Fatalf("enabled %v, err %v; want off", tr.Enabled(), err)
	}
}

// TestUnknownProtocolIsRefused: a protocol the exporters do not speak is an
// error naming the variable, not a silent fallback.
func TestUnknownProtocolIsRefused(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := tracing.Setup(context.Background(), "sluice", "test")
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Fatalf("err = %v, want one naming OTEL_EXPORTER_OTLP_PROTOCOL", err)
	}
}
