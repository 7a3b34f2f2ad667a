package envoyemu

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// cluster is a static cluster: its endpoints in order, their load
// balancing metadata and their locality's metadata.
type cluster struct {
	name      string
	metadata  *corev3.Metadata
	endpoints []*endpoint
	// subsets are the subset selectors' key sets; nil without
	// lb_subset_config.
	subsets  [][]string
	fallback clusterv3.Cluster_LbSubsetConfig_LbSubsetFallbackPolicy
	next     atomic.Uint64 // round robin

	grpcOnce sync.Once
	grpcConn *grpc.ClientConn
	grpcErr  error
}

type endpoint struct {
	addr string // as configured
	// metadata and locality are the endpoint's and its locality's
	// filter_metadata.
	metadata, locality *corev3.Metadata
}

func newCluster(c *clusterv3.Cluster) (*cluster, error) {
	switch c.GetType() {
	case clusterv3.Cluster_STATIC, clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
	default:
		return nil, fmt.Errorf("type %s is not emulated (STATIC, STRICT_DNS and LOGICAL_DNS are)", c.GetType())
	}
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_ROUND_ROBIN, clusterv3.Cluster_RANDOM, clusterv3.Cluster_LEAST_REQUEST:
		// Each picks among the same endpoints; the emulator takes them in
		// turn.
	default:
		return nil, fmt.Errorf("lb_policy %s is not emulated", c.GetLbPolicy())
	}
	cl := &cluster{name: c.GetName(), metadata: c.GetMetadata()}
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			addr, err := socketAddr(lb.GetEndpoint().GetAddress())
			if err != nil {
				return nil, err
			}
			cl.endpoints = append(cl.endpoints, &endpoint{addr: addr, metadata: lb.GetMetadata(), locality: le.GetMetadata()})
		}
	}
	if len(cl.endpoints) == 0 {
		return nil, errors.New("no endpoints in load_assignment")
	}
	if sc := c.GetLbSubsetConfig(); sc != nil {
		for _, s := range sc.GetSubsetSelectors() {
			cl.subsets = append(cl.subsets, s.GetKeys())
		}
		cl.fallback = sc.GetFallbackPolicy()
		if cl.fallback == clusterv3.Cluster_LbSubsetConfig_DEFAULT_SUBSET {
			return nil, errors.New("lb_subset_config's DEFAULT_SUBSET fallback is not emulated")
		}
	}
	return cl, nil
}

// pick chooses an endpoint for a request whose envoy.lb match criteria
// (the route's metadata_match and the stream's envoy.lb dynamic metadata)
// are match: among the endpoints of the subset match names when a
// selector has exactly its keys, else among all as the fallback policy
// allows. nil: no healthy upstream.
func (c *cluster) pick(match map[string]*structpb.Value) *endpoint {
	candidates := c.endpoints
	if c.subsets != nil {
		var subset []*endpoint
		if len(match) > 0 && c.hasSelector(match) {
			for _, ep := range c.endpoints {
				if lbMatches(ep.metadata, match) {
					subset = append(subset, ep)
				}
			}
		}
		if len(subset) > 0 {
			candidates = subset
		} else if c.fallback == clusterv3.Cluster_LbSubsetConfig_NO_FALLBACK {
			return nil
		}
	}
	n := c.next.Add(1) - 1
	return candidates[n%uint64(len(candidates))]
}

func (c *cluster) hasSelector(match map[string]*structpb.Value) bool {
	for _, keys := range c.subsets {
		if len(keys) != len(match) {
			continue
		}
		all := true
		for _, k := range keys {
			if _, ok := match[k]; !ok {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

func lbMatches(md *corev3.Metadata, match map[string]*structpb.Value) bool {
	fields := md.GetFilterMetadata()["envoy.lb"].GetFields()
	for k, want := range match {
		got, ok := fields[k]
		if !ok || !valuesEqual(got, want) {
			return false
		}
	}
	return true
}

func valuesEqual(a, b *structpb.Value) bool { return proto.Equal(a, b) }

// rateLimitClient is the cluster as a gRPC rate limit service: its first
// endpoint, over HTTP/2 without TLS.
func (c *cluster) rateLimitClient(e *Emulator) (rlspb.RateLimitServiceClient, error) {
	c.grpcOnce.Do(func() {
		c.grpcConn, c.grpcErr = grpc.NewClient(e.dialAddr(c.endpoints[0].addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	})
	if c.grpcErr != nil {
		return nil, c.grpcErr
	}
	return rlspb.NewRateLimitServiceClient(c.grpcConn), nil
}

func (c *cluster) close() {
	if c.grpcConn != nil {
		_ = c.grpcConn.Close()
	}
}
