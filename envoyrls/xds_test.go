package envoyrls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/xdstest"
	"github.com/sluicelabs/sluice/memory"
)

func userLimit(perHour uint32, unit rlconfv3.RateLimitUnit) *rlconfv3.RateLimitConfig {
	return &rlconfv3.RateLimitConfig{Name: "api-limits", Domain: "api", Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: perHour},
		Descriptors: []*rlconfv3.RateLimitDescriptor{{Key: "path", Value: "/admin", RateLimit: &rlconfv3.RateLimitPolicy{Unlimited: true}}},
	}}}
}

// watchXDS returns a server on a memory store that takes its configuration
// from the management server at addr until the test ends.
func watchXDS(t *testing.T, addr string, opts envoyrls.XDSOptions) *envoyrls.Server {
	t.Helper()
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	t.Cleanup(func() { engine.Close(); store.Close() })
	srv := envoyrls.NewServer(envoyrls.Options{Engine: engine})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // after the watch below stops
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.WatchXDS(ctx, conn, opts)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return srv
}

// TestXDSConfiguration: the rate-limit configuration comes from a real xDS
// management server; an invalid snapshot is NACKed with the reason and the
// last good configuration stays in force; a valid one replaces it.
func TestXDSConfiguration(t *testing.T) {
	mgmt := xdstest.Start(t)
	var loadsMu sync.Mutex
	var loads []error
	srv := watchXDS(t, mgmt.Addr, envoyrls.XDSOptions{NodeID: "rls-node", RetryInterval: 50 * time.Millisecond,
		NodeMetadata: map[string]string{"zone": "eu-1"}, Headers: map[string]string{"x-xds-token": "t0ken"}, OnLoad: func(_ *envoyrls.Config, err error) {
			loadsMu.Lock()
			loads = append(loads, err)
			loadsMu.Unlock()
		}})
	loadCount := func() int { loadsMu.Lock(); defer loadsMu.Unlock(); return len(loads) }

	call := func() rlspb.RateLimitResponse_Code {
		t.Helper()
		resp, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: userDescriptor("u1")})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}

	// No configuration yet: not serving.
	if _, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: userDescriptor("u1")}); err == nil {
		t.Fatal("answered before any configuration arrived")
	}

	// A snapshot for another node is not ours.
	mgmt.Set(t, "other-node", "1", userLimit(5, rlconfv3.RateLimitUnit_HOUR))
	mgmt.Set(t, "rls-node", "1", userLimit(1, rlconfv3.RateLimitUnit_HOUR))
	testenv.Eventually(t, 10*time.Second, "the first configuration", func() bool { return srv.Config() != nil })
	if got := srv.Config().Dump(); got != "api.user: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false\napi.user.path_/admin: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" {
		t.Fatalf("configuration from xDS:\n%s", got)
	}
	if a, b := call(), call(); a != rlspb.RateLimitResponse_OK || b != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("1 per hour: %v then %v, want OK then OVER_LIMIT", a, b)
	}
	// The node's metadata and the stream's headers reached the server.
	if zone := mgmt.Node().GetMetadata().GetFields()["zone"].GetStringValue(); zone != "eu-1" {
		t.Errorf("node metadata zone = %q, want eu-1", zone)
	}
	if got := mgmt.Headers().Get("x-xds-token"); len(got) != 1 || got[0] != "t0ken" {
		t.Errorf("stream header x-xds-token = %q, want [t0ken]", got)
	}

	// Invalid (a limit without a unit): NACKed, the last good one stays.
	mgmt.Set(t, "rls-node", "2", userLimit(100, rlconfv3.RateLimitUnit_UNKNOWN))
	testenv.Eventually(t, 10*time.Second, "a NACK", func() bool { return len(mgmt.NACKs()) > 0 })
	if nack := mgmt.NACKs()[0]; !strings.Contains(nack, "xds:api-limits") || !strings.Contains(nack, "unit") {
		t.Fatalf("NACK %q does not name the resource and what is wrong", nack)
	}
	if call() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatal("the refused configuration was put in force")
	}
	loadsMu.Lock()
	if len(loads) != 2 || loads[0] != nil || loads[1] == nil {
		t.Errorf("loads reported %v, want a success then a failure", loads)
	}
	loadsMu.Unlock()

	// Valid again, with a higher limit: in force (the counter is kept, so
	// one more request is admitted).
	mgmt.Set(t, "rls-node", "3", userLimit(2, rlconfv3.RateLimitUnit_HOUR))
	testenv.Eventually(t, 10*time.Second, "the third configuration", func() bool { return loadCount() >= 3 })
	loadsMu.Lock()
	if len(loads) != 3 || loads[2] != nil {
		t.Errorf("loads reported %v, want success, failure (once, however often the server resends it), success", loads)
	}
	loadsMu.Unlock()
	if a, b := call(), call(); a != rlspb.RateLimitResponse_OK || b != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("2 per hour after 1: %v then %v, want OK then OVER_LIMIT", a, b)
	}
}

func userDescriptor(user string) []*ratelimitv3.RateLimitDescriptor {
	return []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}
}

// TestXDSReconnects: while the management server is away the last good
// configuration stays in force; once one is back on the address, the stream
// is reopened and its configuration taken.
func TestXDSReconnects(t *testing.T) {
	mgmt := xdstest.Start(t)
	srv := watchXDS(t, mgmt.Addr, envoyrls.XDSOptions{NodeID: "n", RetryInterval: 20 * time.Millisecond})
	inForce := func(perHour int) bool {
		return srv.Config() != nil && strings.HasPrefix(srv.Config().Dump(), fmt.Sprintf("api.user: unit=HOUR requests_per_unit=%d,", perHour))
	}

	mgmt.Set(t, "n", "1", userLimit(5, rlconfv3.RateLimitUnit_HOUR))
	testenv.Eventually(t, 10*time.Second, "the first configuration", func() bool { return inForce(5) })
	mgmt.Stop()
	if !inForce(5) {
		t.Fatalf("with the management server away:\n%s\nwant the last good limit of 5", srv.Config().Dump())
	}
	again := xdstest.StartOn(t, mgmt.Addr)
	again.Set(t, "n", "1", userLimit(7, rlconfv3.RateLimitUnit_HOUR))
	testenv.Eventually(t, 10*time.Second, "the configuration of the restarted server", func() bool { return inForce(7) })
}
