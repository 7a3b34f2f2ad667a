package envoyrls_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/memory"
)

// countingServer is memoryServer on a store that counts its checks
// (countingStore, in redis_test.go).
func countingServer(t *testing.T) (*envoyrls.Server, *countingStore) {
	t.Helper()
	clock := newTestClock()
	store := memory.New(memory.Options{Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	cs := &countingStore{Store: store}
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{Engine: (*observed)(nil).engine(t, cs, check.Options{Clock: clock.Now})})
	return srv, cs
}

// ips is n descriptors of the per-IP rule of testdata/readme, each its own
// counter, so each is a store call.
func ips(n int) []*ratelimitv3.RateLimitDescriptor {
	descs := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range descs {
		descs[i] = desc("remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	return descs
}

// same is n times the descriptor d.
func same(d *ratelimitv3.RateLimitDescriptor, n int) []*ratelimitv3.RateLimitDescriptor {
	descs := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range descs {
		descs[i] = d
	}
	return descs
}

// TestRequestBounds: a request past a bound is refused whole with
// InvalidArgument naming the count and the bound, before any store call;
// one at the bound is answered.
func TestRequestBounds(t *testing.T) {
	const domain = "edge_proxy_per_ip"
	long := func(n int) string { return strings.Repeat("x", n) }
	manyEntries := desc()
	for range envoyrls.MaxEntries + 1 {
		manyEntries.Entries = append(manyEntries.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	refused := []struct {
		name  string
		descs []*ratelimitv3.RateLimitDescriptor
		want  []string // in the message
	}{
		{"too_many_descriptors", ips(envoyrls.MaxDescriptors + 1), []string{"65 descriptors", "at most 64"}},
		{"100000_descriptors", same(desc("remote_address", "a"), 100000), []string{"100000 descriptors", "at most 64"}},
		{"too_many_entries", append(ips(1), manyEntries), []string{"descriptor 1 has 33 entries", "at most 32"}},
		{"long_key", []*ratelimitv3.RateLimitDescriptor{desc(long(envoyrls.MaxKeyBytes+1), "v")}, []string{"key is 1025 bytes", "at most 1024"}},
		{"long_value", []*ratelimitv3.RateLimitDescriptor{desc("remote_address", long(envoyrls.MaxValueBytes+1))}, []string{"value is 61441 bytes", "at most 61440"}},
		{"huge_hits_addend", append(ips(1), withHits(desc("remote_address", "b"), 1<<40)), []string{"descriptor 1 has hits_addend 1099511627776", "at most 4294967295"}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			srv, store := countingServer(t)
			_, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: tt.descs})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("message %q does not say %q", status.Convert(err).Message(), w)
				}
			}
			if n := store.checks.Load(); n != 0 {
				t.Errorf("%d store calls for a refused request, want 0", n)
			}
		})
	}

	t.Run("at_the_bounds", func(t *testing.T) {
		srv, store := countingServer(t)
		descs := ips(envoyrls.MaxDescriptors)
		descs[0] = desc("remote_address", long(envoyrls.MaxValueBytes))
		resp, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
		if err != nil || resp.OverallCode != ok {
			t.Fatalf("%d descriptors: %v, %v", len(descs), resp.GetOverallCode(), err)
		}
		if n := store.checks.Load(); n != envoyrls.MaxDescriptors {
			t.Errorf("%d store calls, want one per descriptor (%d)", n, envoyrls.MaxDescriptors)
		}
		// The largest hits_addend accepted is over this limit of 10, not
		// an error: what envoyproxy/ratelimit answers.
		resp, err = srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("remote_address", "c"), math.MaxUint32)}})
		if err != nil || resp.OverallCode != over {
			t.Fatalf("hits_addend 2^32-1: %v, %v; want OVER_LIMIT", resp.GetOverallCode(), err)
		}
		resp, err = srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, HitsAddend: math.MaxUint32, Descriptors: ips(1)})
		if err != nil || resp.OverallCode != over {
			t.Fatalf("request hits_addend 2^32-1: %v, %v; want OVER_LIMIT", resp.GetOverallCode(), err)
		}
	})
}

// TestJSONRequestBounds: POST /json answers a request past a bound with 400
// and the sentence, and no store call. 64 KiB of JSON held about 1,500
// descriptors; 1,000 of these fit.
func TestJSONRequestBounds(t *testing.T) {
	srv, store := countingServer(t)
	ts := httptest.NewServer(srv.JSONHandler())
	t.Cleanup(ts.Close)
	body, _ := protojson.Marshal(&rlspb.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: ips(1000)})
	if len(body) > 64<<10 {
		t.Fatalf("the request is %d bytes, over the body limit", len(body))
	}
	resp, err := http.Post(ts.URL+"/json", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code, Message string }
	}
	if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, "1000 descriptors; at most 64") {
		t.Fatalf("1,000 descriptors: %d %s; want 400 invalid_request naming the count and the bound", resp.StatusCode, b)
	}
	if n := store.checks.Load(); n != 0 {
		t.Errorf("%d store calls, want 0", n)
	}
}

// TestServerOptionsBoundStreamsPerConnection: the server announces its
// bound of 1,024 calls per connection in its HTTP/2 SETTINGS, which clients
// (Envoy, grpc-go) honour by waiting or opening another connection, and past
// which it refuses streams. Go's gRPC server announces no bound by default.
func TestServerOptionsBoundStreamsPerConnection(t *testing.T) {
	srv, _ := countingServer(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoyrls.ServerOptions()...)
	srv.Register(gs)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := net.DialTimeout("tcp", lis.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no SETTINGS from the server: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 1024 {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (announced: %v), want 1024", v, ok)
		}
		return
	}
}

// TestServerOptionsBoundMessageSize: a request over 1 MiB is refused by the
// transport, before it is decoded, with ResourceExhausted.
func TestServerOptionsBoundMessageSize(t *testing.T) {
	srv, store := countingServer(t)
	c := rlspb.NewRateLimitServiceClient(serveConn(t, srv))
	descs := make([]*ratelimitv3.RateLimitDescriptor, 20)
	for i := range descs {
		descs[i] = desc("remote_address", strings.Repeat("x", 60<<10))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: descs})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 1.2 MiB request: %v; want ResourceExhausted", err)
	}
	if n := store.checks.Load(); n != 0 {
		t.Errorf("%d store calls, want 0", n)
	}
	// A normal request on the same connection still works.
	if _, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: ips(1)}); err != nil {
		t.Fatal(err)
	}
}
