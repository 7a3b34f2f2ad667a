// Package xdstest runs a real go-control-plane xDS management server for
// tests: it serves snapshots of envoyproxy/ratelimit's RateLimitConfig
// resources over the aggregated discovery service, and records the NACKs it
// receives.
package xdstest

import (
	"context"
	"net"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Server is a running management server.
type Server struct {
	// Addr is its host:port.
	Addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	nacks []string
	// node and headers are those of the last request and stream seen.
	node    *corev3.Node
	headers metadata.MD

	stop     func()
	stopOnce sync.Once
}

// Start starts a management server on a loopback port, with opts (such as
// grpc.Creds for TLS); it stops when the test ends.
func Start(t testing.TB, opts ...grpc.ServerOption) *Server {
	return StartOn(t, "127.0.0.1:0", opts...)
}

// StartOn starts a management server on addr (such as the Addr of one that
// was stopped, to play a restart); it stops when the test ends.
func StartOn(t testing.TB, addr string, opts ...grpc.ServerOption) *Server {
	t.Helper()
	s := &Server{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	callbacks := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers = md
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if req.GetNode() != nil {
				s.node = req.GetNode()
			}
			if d := req.GetErrorDetail(); d != nil {
				s.nacks = append(s.nacks, d.GetMessage())
			}
			return nil
		},
	}
	gs := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(ctx, s.cache, callbacks))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	go func() { _ = gs.Serve(lis) }()
	s.stop = func() { gs.Stop(); cancel() }
	t.Cleanup(s.Stop)
	return s
}

// Stop stops the server, ending its streams; stopping twice is harmless.
func (s *Server) Stop() { s.stopOnce.Do(s.stop) }

// Set makes configs, at version, the snapshot served to node.
func (s *Server) Set(t testing.TB, node, version string, configs ...*rlconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, 0, len(configs))
	for _, c := range configs {
		res = append(res, c)
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// NACKs returns the error messages of the NACKs received so far.
func (s *Server) NACKs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nacks...)
}

// Node returns the node the last request presented (nil before any).
func (s *Server) Node() *corev3.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// Headers returns the gRPC metadata of the last stream opened.
func (s *Server) Headers() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers.Copy()
}
