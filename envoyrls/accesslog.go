package envoyrls

import (
	"context"
	"log/slog"
	"net"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice/internal/accesslog"
)

// AccessLog logs each unary call as one record, message "access": the
// method, the gRPC code and, for ShouldRateLimit, Envoy's overall code; the
// gRPC counterpart of httpapi.AccessLog. Calls answered OK (not OVER_LIMIT)
// are kept with probability sample, like allowed HTTP checks; health checks
// that succeed are not logged.
func AccessLog(log *slog.Logger, sample float64) grpc.UnaryServerInterceptor {
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
