package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// XDSOptions configure WatchXDS.
type XDSOptions struct {
	// NodeID is the node this server presents to the management server,
	// which keys its snapshots by it (envoyproxy/ratelimit's
	// CONFIG_GRPC_XDS_NODE_ID, "default" there and here).
	NodeID string
	// NodeMetadata is the node's metadata, as string values
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	NodeMetadata map[string]string
	// Headers are sent with the stream as gRPC metadata, such as a token the
	// management server asks for (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// RetryInterval is the wait before reconnecting after the stream ends
	// (default 3s, as CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL).
	RetryInterval time.Duration
	// OnLoad, if set, is told of every configuration received: the one now
	// in force, or why it was refused (and NACKed).
	OnLoad func(cfg *Config, err error)
}

// WatchXDS takes the configuration from an xDS management server over conn,
// as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does: a state-of-the-
// world subscription to RateLimitConfig resources (one domain each) on the
// aggregated discovery service. Each response is the whole configuration; it
// is validated as files are, ACKed and put in force, or NACKed with the
// reason while the last good configuration stays. Until the first good one
// arrives the server answers UNAVAILABLE and its health is NOT_SERVING. A
// broken stream is reopened after RetryInterval. It returns when ctx is done.
func (s *Server) WatchXDS(ctx context.Context, conn grpc.ClientConnInterface, opts XDSOptions) {
	if opts.NodeID == "" {
		opts.NodeID = "default"
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 3 * time.Second
	}
	onLoad := opts.OnLoad
	if onLoad == nil {
		onLoad = func(*Config, error) {}
	}
	node := &corev3.Node{Id: opts.NodeID}
	if len(opts.NodeMetadata) > 0 {
		node.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range opts.NodeMetadata {
			node.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	streamCtx := ctx
	if len(opts.Headers) > 0 {
		streamCtx = metadata.NewOutgoingContext(ctx, metadata.New(opts.Headers))
	}
	lastErr := ""
	for ctx.Err() == nil {
		err := s.followXDS(streamCtx, conn, node, onLoad)
		if ctx.Err() != nil {
			return
		}
		// Logged once per distinct problem while the server stays away.
		if err.Error() != lastErr {
			s.log.Warn("xDS stream to the rate limit configuration server ended; reconnecting", "error", err, "retry_in", opts.RetryInterval.String())
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(opts.RetryInterval):
		}
	}
}

// followXDS opens one stream and applies its responses until it breaks.
func (s *Server) followXDS(ctx context.Context, conn grpc.ClientConnInterface, node *corev3.Node, onLoad func(*Config, error)) error {
	// The stream ends with ctx: a stream context of its own, so a broken
	// stream is not left open when followXDS returns.
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := sotw.NewADSClient(streamCtx, node, resource.RateLimitConfigType)
	if err := client.InitConnect(conn); err != nil {
		return fmt.Errorf("open the xDS stream: %w", err)
	}
	// The server may send a refused snapshot again after the NACK: it is
	// refused again, but reported once.
	refused := ""
	for {
		resp, err := client.Fetch()
		if err != nil {
			return fmt.Errorf("receive from the xDS server: %w", err)
		}
		cfg, err := ConfigFromXDS(resp.Resources)
		if err != nil {
			s.stats.configLoaded(err)
			if err.Error() != refused {
				s.log.Error("rate limit configuration from xDS refused (NACK); keeping the last good one", "error", err)
				onLoad(nil, err)
				refused = err.Error()
			}
			if err := client.Nack(err.Error()); err != nil {
				return fmt.Errorf("NACK the xDS response: %w", err)
			}
			continue
		}
		refused = ""
		first := s.Config() == nil
		s.SetConfig(cfg)
		if first {
			s.log.Info("envoy rate limit configuration loaded from xDS", "domains", cfg.Domains())
		} else {
			s.log.Info("envoy rate limit configuration reloaded from xDS", "domains", cfg.Domains())
		}
		onLoad(cfg, nil)
		if err := client.Ack(); err != nil {
			return fmt.Errorf("ACK the xDS response: %w", err)
		}
	}
}

// ConfigFromXDS builds a configuration from RateLimitConfig resources, each
// one domain, validated exactly as files are (a resource is named by its
// name in errors, as "xds:name").
func ConfigFromXDS(resources []*anypb.Any) (*Config, error) {
	var domains []*Domain
	var errs []error
	for _, r := range resources {
		var rc rlconfv3.RateLimitConfig
		if err := r.UnmarshalTo(&rc); err != nil {
			errs = append(errs, fmt.Errorf("an xDS resource of type %s is not a RateLimitConfig: %w", r.GetTypeUrl(), err))
			continue
		}
		name := "xds:" + rc.GetName()
		// Through the YAML form, so the one parser validates both sources.
		data, err := yaml.Marshal(xdsDomainYAML(&rc))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		d, err := ParseDomain(name, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains = append(domains, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewConfig(domains...)
}

// xdsDomainYAML is a RateLimitConfig as the YAML document of the same
// meaning, in envoyproxy/ratelimit's schema.
func xdsDomainYAML(rc *rlconfv3.RateLimitConfig) map[string]any {
	return map[string]any{"domain": rc.GetDomain(), "descriptors": xdsDescriptorsYAML(rc.GetDescriptors())}
}

func xdsDescriptorsYAML(descs []*rlconfv3.RateLimitDescriptor) []map[string]any {
	out := make([]map[string]any, 0, len(descs))
	for _, d := range descs {
		y := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			y["value"] = d.GetValue()
		}
		if d.GetShadowMode() {
			y["shadow_mode"] = true
		}
		if d.GetDetailedMetric() {
			y["detailed_metric"] = true
		}
		if p := d.GetRateLimit(); p != nil {
			rl := map[string]any{}
			if p.GetUnlimited() {
				rl["unlimited"] = true
			} else {
				// proto3 cannot tell 0 from unset: 0 is what both mean
				// there, every request over the limit. UNKNOWN is left out,
				// so the parser says the unit is missing.
				rl["requests_per_unit"] = p.GetRequestsPerUnit()
				if p.GetUnit() != rlconfv3.RateLimitUnit_UNKNOWN {
					rl["unit"] = p.GetUnit().String()
				}
			}
			if p.GetName() != "" {
				rl["name"] = p.GetName()
			}
			if len(p.GetReplaces()) > 0 {
				var reps []map[string]any
				for _, r := range p.GetReplaces() {
					reps = append(reps, map[string]any{"name": r.GetName()})
				}
				rl["replaces"] = reps
			}
			y["rate_limit"] = rl
		}
		if len(d.GetDescriptors()) > 0 {
			y["descriptors"] = xdsDescriptorsYAML(d.GetDescriptors())
		}
		out = append(out, y)
	}
	return out
}
