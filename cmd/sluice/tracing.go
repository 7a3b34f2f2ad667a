package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicelabs/sluice/tracing"
)

// processTracing is a process's tracing with the shutdown its closers call.
type processTracing struct {
	*tracing.Tracing
	log *slog.Logger
}

// tracingShutdownTimeout bounds the export of the last spans at exit, so a
// collector that is gone cannot hold the process.
const tracingShutdownTimeout = 5 * time.Second

// startTracing sets up OpenTelemetry tracing from the OTEL_* environment
// and says in the log whether it is on, and where spans go.
func startTracing(ctx context.Context, service string, log *slog.Logger) (*processTracing, error) {
	ver, _ := buildVersion()
	t, err := tracing.Setup(ctx, service, ver)
	if err != nil {
		return nil, err
	}
	if t.Enabled() {
		log.Info("tracing on", "protocol", t.Protocol, "endpoint", t.Endpoint)
	} else {
		log.Debug("tracing off: OTEL_EXPORTER_OTLP_ENDPOINT is not set")
	}
	return &processTracing{Tracing: t, log: log}, nil
}

// shutdown exports the spans still buffered.
func (t *processTracing) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		t.log.Warn("tracing: the last spans could not be exported", "error", err)
	}
	return nil
}
