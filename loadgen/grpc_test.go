package loadgen_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicelabs/sluice/loadgen"
)

// fakeRLS answers by the value of the "user" entry, so each answer the
// classification must handle can be asked for.
type fakeRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (fakeRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.Domain != "api" || req.HitsAddend != 3 || len(req.Descriptors) != 2 {
		return nil, status.Errorf(codes.InvalidArgument, "unexpected request %v", req)
	}
	var user string
	for _, e := range req.Descriptors[0].Entries {
		if e.Key == "user" {
			user = e.Value
		}
	}
	switch user {
	case "over":
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, nil
	case "shed":
		return nil, status.Error(codes.ResourceExhausted, "overloaded")
	case "down":
		return nil, status.Error(codes.Unavailable, "rate limit store unavailable")
	}
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

func startFakeRLS(t *testing.T) (addr string, hs *health.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, fakeRLS{})
	hs = health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), hs
}

func TestEnvoyCheckClassifiesAnswers(t *testing.T) {
	addr, hs := startFakeRLS(t)
	conns, err := loadgen.DialGRPC(addr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	descriptors := []loadgen.Descriptor{{{Key: "api", Value: "orders"}, {Key: "user"}}, {{Key: "tier", Value: "free"}}}
	check, err := loadgen.NewEnvoyCheck(conns, "api", descriptors, "user", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := check.Request("42").Descriptors[0].Entries[1].Value; got != "42" {
		t.Fatalf("the subject is not the user entry's value: %q", got)
	}
	ctx := context.Background()
	for subject, want := range map[string]loadgen.Outcome{"ok": loadgen.Allowed, "over": loadgen.Denied, "shed": loadgen.Shed} {
		if out, err := check.Do(ctx, subject); err != nil || out != want {
			t.Errorf("%s: got %v, %v; want outcome %v", subject, out, err, want)
		}
	}
	if _, err := check.Do(ctx, "down"); status.Code(err) != codes.Unavailable {
		t.Errorf("UNAVAILABLE must be a failure, got %v", err)
	}

	ref := loadgen.NewGRPCHealth(conns, "")
	if out, err := ref.Do(ctx, "x"); err != nil || out != loadgen.Allowed {
		t.Fatalf("health: %v %v", out, err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if _, err := ref.Do(ctx, "x"); err == nil || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Fatalf("NOT_SERVING must be a failure, got %v", err)
	}

	// In a run, shed requests are counted apart from answers and failures.
	res, err := loadgen.Run(ctx, loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		if strings.HasSuffix(subject, "0") || subject == "hot" {
			return check.Do(ctx, "shed")
		}
		return check.Do(ctx, subject)
	}), loadgen.Options{Concurrency: 4, Duration: 200 * time.Millisecond, Subjects: 20, HotFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Shed == 0 || res.Allowed == 0 || res.Errors != 0 || res.Sent != res.Allowed+res.Denied+res.Shed || res.ShedPercentile(0.5) <= 0 {
		t.Fatalf("shed not counted apart: %+v", res)
	}
}

func TestNewEnvoyCheckRejectsBadDescriptors(t *testing.T) {
	for name, c := range map[string]struct {
		domain, key string
		ds          []loadgen.Descriptor
		says        string
	}{
		"no_domain":      {"", "user", []loadgen.Descriptor{{{Key: "user"}}}, "domain"},
		"no_descriptors": {"api", "user", nil, "at least one descriptor"},
		"empty":          {"api", "user", []loadgen.Descriptor{{}}, "no entries"},
		"empty_key":      {"api", "user", []loadgen.Descriptor{{{Key: "", Value: "v"}}}, "empty key"},
		"no_subject":     {"api", "user", []loadgen.Descriptor{{{Key: "ip", Value: "1"}}}, `keyed "user"`},
	} {
		if _, err := loadgen.NewEnvoyCheck(nil, c.domain, c.ds, c.key, 1); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want an error about %s", name, err, c.says)
		}
	}
	if _, err := loadgen.DialGRPC("127.0.0.1:1", 0); err == nil {
		t.Error("zero connections accepted")
	}
}
