package tracing

import (
	"context"
	"log/slog"
	"time"
)

// ShutdownTimeout bounds the export of the last spans at exit, so a
// collector that is gone cannot hold the process.
const ShutdownTimeout = 5 * time.Second

// Start is Setup for a process: it also says in log whether tracing is on,
// and where spans go, so an operator can tell from the start log.
func Start(ctx context.Context, service, version string, log *slog.Logger) (*Tracing, error) {
	t, err := Setup(ctx, service, version)
	if err != nil {
		return nil, err
	}
	if t.Enabled() {
		log.Info("tracing on", "protocol", t.Protocol, "endpoint", t.Endpoint)
	} else {
		log.Debug("tracing off: OTEL_EXPORTER_OTLP_ENDPOINT is not set")
	}
	return t, nil
}

// Close exports the spans still buffered, within ShutdownTimeout. A failure
// is a warning in log, not an error: the process is ending anyway.
func (t *Tracing) Close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: the last spans could not be exported", "error", err)
	}
}
