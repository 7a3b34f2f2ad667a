package main

import (
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/accesslog"
)

// defaultAccessLogSample is the fraction of allowed checks the access log
// keeps: denials and errors are always kept.
const defaultAccessLogSample = accesslog.DefaultSample

// observeHTTP wraps the public listener's handler: the access log when
// --access-log is on, inside tracing (so records carry the trace ID).
func (cfg serveConfig) observeHTTP(h http.Handler, log *slog.Logger, traces *processTracing) http.Handler {
	if cfg.AccessLog {
		h = httpapi.AccessLog(h, httpapi.AccessLogOptions{Logger: log, SampleAllowed: cfg.AccessLogSample})
	}
	return traces.Handler(h, "sluice")
}

// grpcOptions are the options of the Envoy gRPC listener: tracing, and the
// access log when --access-log is on.
func (cfg serveConfig) grpcOptions(log *slog.Logger, traces *processTracing) []grpc.ServerOption {
	opts := traces.GRPCServerOptions()
	if cfg.AccessLog {
		opts = append(opts, grpc.ChainUnaryInterceptor(envoyrls.AccessLog(log, cfg.AccessLogSample)))
	}
	return opts
}
