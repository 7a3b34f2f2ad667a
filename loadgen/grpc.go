package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// GRPCConns is a small pool of client connections to one gRPC server, used
// in turn. One HTTP/2 connection serialises its frames through one socket
// and one reader goroutine on each side; a few spread the load over cores as
// a fleet of Envoys would, without a connection per request.
type GRPCConns struct {
	conns []*grpc.ClientConn
	next  atomic.Uint64
}

// DialGRPC returns n connections to addr (host:port), without TLS. They
// connect on first use, so a server that is not there shows up as the first
// request's error.
func DialGRPC(addr string, n int) (*GRPCConns, error) {
	if n < 1 {
		return nil, fmt.Errorf("bench: at least one gRPC connection is needed, got %d", n)
	}
	p := &GRPCConns{}
	for range n {
		// Each NewClient is its own ClientConn, hence its own transport.
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("bench: gRPC client for %s: %w", addr, err)
		}
		p.conns = append(p.conns, cc)
	}
	return p, nil
}

func (p *GRPCConns) conn() *grpc.ClientConn {
	return p.conns[(p.next.Add(1)-1)%uint64(len(p.conns))]
}

// Close closes every connection.
func (p *GRPCConns) Close() error {
	var errs []error
	for _, cc := range p.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// Entry is one key and value of an Envoy rate limit descriptor.
type Entry struct{ Key, Value string }

// Descriptor is one Envoy rate limit descriptor: its entries, in order.
type Descriptor []Entry

// EnvoyCheck is Envoy's rate limit service (ShouldRateLimit) as a target: one
// request for a domain and descriptors, with the run's subject as the value
// of every entry keyed SubjectKey.
type EnvoyCheck struct {
	conns       *GRPCConns
	domain      string
	descriptors []Descriptor
	subjectKey  string
	hits        uint32
}

// NewEnvoyCheck returns a ShouldRateLimit target. With subjectKey "", every
// request sends the descriptors as given (one set of counters); otherwise
// subjectKey must be the key of an entry of at least one descriptor. hits is
// the request's hits_addend (0: the server's default of 1).
func NewEnvoyCheck(conns *GRPCConns, domain string, descriptors []Descriptor, subjectKey string, hits uint32) (*EnvoyCheck, error) {
	if domain == "" {
		return nil, errors.New("bench: the Envoy rate limit domain must not be empty")
	}
	if len(descriptors) == 0 {
		return nil, errors.New("bench: at least one descriptor is needed")
	}
	found := subjectKey == ""
	for i, d := range descriptors {
		if len(d) == 0 {
			return nil, fmt.Errorf("bench: descriptor %d has no entries", i+1)
		}
		for _, e := range d {
			if e.Key == "" {
				return nil, fmt.Errorf("bench: descriptor %d has an entry with an empty key", i+1)
			}
			found = found || e.Key == subjectKey
		}
	}
	if !found {
		return nil, fmt.Errorf("bench: no descriptor has an entry keyed %q to carry the subject", subjectKey)
	}
	return &EnvoyCheck{conns: conns, domain: domain, descriptors: descriptors, subjectKey: subjectKey, hits: hits}, nil
}

// Request is the request Do sends for subject.
func (e *EnvoyCheck) Request(subject string) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: e.domain, HitsAddend: e.hits,
		Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(e.descriptors))}
	for i, d := range e.descriptors {
		entries := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(d))
		for j, en := range d {
			v := en.Value
			if en.Key == e.subjectKey {
				v = subject
			}
			entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: en.Key, Value: v}
		}
		req.Descriptors[i] = &ratelimitv3.RateLimitDescriptor{Entries: entries}
	}
	return req
}

// Do sends one ShouldRateLimit: OK is allowed, OVER_LIMIT denied,
// RESOURCE_EXHAUSTED shed, any other status (UNAVAILABLE when the store is
// down, say) an error.
func (e *EnvoyCheck) Do(ctx context.Context, subject string) (Outcome, error) {
	resp, err := rlspb.NewRateLimitServiceClient(e.conns.conn()).ShouldRateLimit(ctx, e.Request(subject))
	if err != nil {
		return grpcError(err)
	}
	switch resp.GetOverallCode() {
	case rlspb.RateLimitResponse_OK:
		return Allowed, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return Denied, nil
	}
	return 0, fmt.Errorf("ShouldRateLimit answered overall code %v", resp.GetOverallCode())
}

// GRPCHealth is the reference target for gRPC: the standard health check
// (grpc.health.v1.Health/Check), which does no work, over the same
// connections as the check: what the gRPC round trip alone costs.
type GRPCHealth struct {
	conns   *GRPCConns
	service string
}

// NewGRPCHealth returns a target that checks service's health ("" is the
// server as a whole).
func NewGRPCHealth(conns *GRPCConns, service string) *GRPCHealth {
	return &GRPCHealth{conns: conns, service: service}
}

// Do sends one health check: SERVING is allowed, anything else an error.
func (h *GRPCHealth) Do(ctx context.Context, _ string) (Outcome, error) {
	resp, err := healthpb.NewHealthClient(h.conns.conn()).Check(ctx, &healthpb.HealthCheckRequest{Service: h.service})
	if err != nil {
		return grpcError(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return 0, fmt.Errorf("health check answered %v", resp.GetStatus())
	}
	return Allowed, nil
}

// grpcError classifies a failed call: RESOURCE_EXHAUSTED is the server
// shedding load, anything else a failure.
func grpcError(err error) (Outcome, error) {
	if status.Code(err) == codes.ResourceExhausted {
		return Shed, nil
	}
	return 0, err
}
