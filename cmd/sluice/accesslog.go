package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

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
		opts = append(opts, grpc.ChainUnaryInterceptor(grpcAccessLog(log, cfg.AccessLogSample)))
	}
	return opts
}

// grpcAccessLog logs each unary call as one record, message "access": the
// method, the gRPC code and, for ShouldRateLimit, Envoy's overall code.
// Calls answered OK (not OVER_LIMIT) are sampled like allowed HTTP checks;
// health checks that succeed are not logged.
func grpcAccessLog(log *slog.Logger, sample float64) grpc.UnaryServerInterceptor {
	sample = min(max(sample, 0), 1)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		code := status.Code(err)
		overall := ""
		if rl, ok := resp.(*rlspb.RateLimitResponse); ok && err == nil {
			overall = rl.GetOverallCode().String()
		}
		if err == nil && overall != rlspb.RateLimitResponse_OVER_LIMIT.String() {
			if overall == "" || !accesslog.Keep(sample) {
				return resp, err
			}
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs,
			slog.String("method", info.FullMethod),
			slog.String("grpc_code", code.String()),
			slog.Float64("duration_ms", accesslog.Milliseconds(time.Since(start))),
		)
		if overall != "" {
			attrs = append(attrs, slog.String("overall_code", overall))
		}
		if p, ok := peer.FromContext(ctx); ok {
			if host, _, splitErr := net.SplitHostPort(p.Addr.String()); splitErr == nil {
				attrs = append(attrs, slog.String("remote", host))
			}
		}
		attrs = accesslog.AppendTrace(ctx, attrs)
		log.LogAttrs(ctx, slog.LevelInfo, accesslog.Message, attrs...)
		return resp, err
	}
}
