package main

import (
	"context"
	"log/slog"

	"github.com/sluicelabs/sluice/tracing"
)

// processTracing is a process's tracing with the shutdown its closers call.
type processTracing struct {
	*tracing.Tracing
	log *slog.Logger
}

// startTracing sets up OpenTelemetry tracing from the OTEL_* environment
// (tracing.Start), for this build's version.
func startTracing(ctx context.Context, service string, log *slog.Logger) (*processTracing, error) {
	ver, _ := buildVersion()
	t, err := tracing.Start(ctx, service, ver, log)
	if err != nil {
		return nil, err
	}
	return &processTracing{Tracing: t, log: log}, nil
}

// shutdown exports the spans still buffered (tracing.Tracing.Close).
func (t *processTracing) shutdown() error {
	t.Close(t.log)
	return nil
}
