package tracing_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/tracing"
)

// TestStartSaysWhetherTracingIsOn: the start log says where spans go, or
// (at debug) that tracing is off; Close of either ends quietly.
func TestStartSaysWhetherTracingIsOn(t *testing.T) {
	for name, c := range map[string]struct {
		endpoint string
		want     string
	}{
		"off": {"", "tracing off: OTEL_EXPORTER_OTLP_ENDPOINT is not set"},
		"on":  {"http://user:secret@127.0.0.1:1", `msg="tracing on"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			var logs testenv.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tr, err := tracing.Start(context.Background(), "sluice-test", "v0", log)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Enabled() != (c.endpoint != "") || !strings.Contains(logs.String(), c.want) || strings.Contains(logs.String(), "secret") {
				t.Fatalf("enabled %v, log:\n%s\nwant %q, never the endpoint's credentials", tr.Enabled(), logs.String(), c.want)
			}
			tr.Close(log) // nothing buffered: no export to fail
			if strings.Contains(logs.String(), "could not be exported") {
				t.Fatalf("a shutdown with nothing to export warned:\n%s", logs.String())
			}
		})
	}
}
