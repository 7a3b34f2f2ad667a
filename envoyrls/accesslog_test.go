package envoyrls_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
)

func TestAccessLog(t *testing.T) {
	const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	answer := func(resp any, err error) grpc.UnaryHandler {
		return func(context.Context, any) (any, error) { return resp, err }
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 5555}})
	for name, c := range map[string]struct {
		method  string
		sample  float64
		handler grpc.UnaryHandler
		// want are the record's attributes; nil: no record.
		want map[string]any
	}{
		"over_limit_always": {shouldRateLimit, 0, answer(&rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, nil),
			map[string]any{"method": shouldRateLimit, "grpc_code": "OK", "overall_code": "OVER_LIMIT", "remote": "10.0.0.7"}},
		"ok_sampled_out": {shouldRateLimit, 0, answer(&rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil), nil},
		"ok_kept":        {shouldRateLimit, 1, answer(&rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil), map[string]any{"overall_code": "OK"}},
		"error_always": {shouldRateLimit, 0, answer(nil, status.Error(codes.Unavailable, "store down")),
			map[string]any{"grpc_code": "Unavailable"}},
		"health_ok_never":   {"/grpc.health.v1.Health/Check", 1, answer(&healthpb.HealthCheckResponse{}, nil), nil},
		"health_error_kept": {"/grpc.health.v1.Health/Check", 0, answer(nil, errors.New("boom")), map[string]any{"grpc_code": "Unknown"}},
	} {
		t.Run(name, func(t *testing.T) {
			var logs testenv.Buffer
			icpt := envoyrls.AccessLog(slog.New(slog.NewJSONHandler(&logs, nil)), c.sample)
			_, _ = icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: c.method}, c.handler)
			records := testenv.Records(t, logs.String(), "access")
			if c.want == nil {
				if len(records) != 0 {
					t.Fatalf("logged %v, want nothing", records)
				}
				return
			}
			if len(records) != 1 {
				t.Fatalf("%d records, want 1:\n%s", len(records), logs.String())
			}
			for k, v := range c.want {
				if records[0][k] != v {
					t.Errorf("%s = %v, want %v", k, records[0][k], v)
				}
			}
			if _, ok := records[0]["duration_ms"].(float64); !ok {
				t.Errorf("no duration_ms in %v", records[0])
			}
		})
	}
}
