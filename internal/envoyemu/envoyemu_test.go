package envoyemu_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicelabs/sluice/internal/envoyemu"
)

// recordingRLS is a rate limit service that records what it is asked and
// answers OVER_LIMIT when an entry's value is "over".
type recordingRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	mu   sync.Mutex
	asks []string
}

func (r *recordingRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString(req.GetDomain())
	for _, d := range req.GetDescriptors() {
		b.WriteString(" [")
		for i, e := range d.GetEntries() {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		if d.GetHitsAddend() != nil {
			b.WriteString(" +" + strconv.FormatUint(d.GetHitsAddend().GetValue(), 10))
		}
		b.WriteString("]")
	}
	r.asks = append(r.asks, b.String())
	code := rlspb.RateLimitResponse_OK
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if e.GetValue() == "over" {
				code = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	return &rlspb.RateLimitResponse{OverallCode: code}, nil
}

func (r *recordingRLS) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.asks
	r.asks = nil
	return out
}

const testBootstrap = `
static_resources:
  listeners:
    - name: edge
      address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: edge
                route_config:
                  virtual_hosts:
                    - name: vh
                      domains: ["*"]
                      rate_limits:
                        - actions: [{generic_key: {descriptor_value: vh}}]
                      routes:
                        - match: {prefix: /skip}
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - request_headers: {header_name: x-a, descriptor_key: a, skip_if_absent: true}
                                  - request_headers: {header_name: x-b, descriptor_key: b}
                        - match: {prefix: /include}
                          route:
                            cluster: app
                            include_vh_rate_limits: true
                            rate_limits:
                              - actions: [{destination_cluster: {}}, {source_cluster: {}}]
                        - match: {prefix: /match}
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - header_value_match:
                                      descriptor_value: gets
                                      headers: [{name: x-m, string_match: {prefix: "go"}}]
                              - actions: [{masked_remote_address: {v4_prefix_mask_len: 24}}]
                        - match: {prefix: /vhonly}
                          route: {cluster: app}
                        - match: {prefix: /perroute}
                          route:
                            cluster: app
                            rate_limits:
                              - actions: [{generic_key: {descriptor_value: ignored}}]
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              domain: other
                              rate_limits:
                                - actions: [{request_headers: {header_name: x-a, descriptor_key: a}}]
                                  hits_addend: {number: 0}
                                - actions: [{request_headers: {header_name: x-a, descriptor_key: a}}]
                                  apply_on_stream_done: true
                                  hits_addend: {format: "%REQ(x-cost)%"}
                http_filters:
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: test
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service: {envoy_grpc: {cluster_name: ratelimit}}
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
    - name: app
      address: {socket_address: {address: 127.0.0.1, port_value: 10001}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: app
                route_config:
                  virtual_hosts:
                    - name: app
                      domains: ["*"]
                      routes:
                        - match: {prefix: /}
                          direct_response: {status: 200, body: {inline_string: ok}}
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: app
      type: STATIC
      load_assignment:
        cluster_name: app
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 10001}}}}]}]
    - name: ratelimit
      type: STRICT_DNS
      load_assignment:
        cluster_name: ratelimit
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: ratelimit, port_value: 8081}}}}]}]
`

// TestDescriptors: the descriptors sent for a request are Envoy's: a
// missing header drops the descriptor unless skip_if_absent, which drops
// the entry; the virtual host's rate_limits apply when the route has none
// or includes them; RateLimitPerRoute's replace the route's, carry
// hits_addend and the domain, and its apply_on_stream_done one is sent after
// the response.
func TestDescriptors(t *testing.T) {
	rls := &recordingRLS{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, rls)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	b, err := envoyemu.Load([]byte(testBootstrap))
	if err != nil {
		t.Fatal(err)
	}
	e, err := envoyemu.Start(b, envoyemu.Options{
		Addrs:          map[string]string{"0.0.0.0:10000": "127.0.0.1:0", "127.0.0.1:10001": "127.0.0.1:0", "ratelimit:8081": ln.Addr().String()},
		ServiceCluster: "proxy", RateLimitTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	cases := []struct {
		name, path string
		headers    []string
		status     int
		asks       []string
	}{
		{"both headers", "/skip", []string{"x-a", "1", "x-b", "2"}, 200, []string{"test [a=1 b=2]"}},
		{"skip_if_absent drops the entry", "/skip", []string{"x-b", "2"}, 200, []string{"test [b=2]"}},
		{"a missing header drops the descriptor", "/skip", []string{"x-a", "1"}, 200, nil},
		{"include_vh_rate_limits", "/include", nil, 200, []string{"test [destination_cluster=app source_cluster=proxy] [generic_key=vh]"}},
		{"the virtual host's when the route has none", "/vhonly", nil, 200, []string{"test [generic_key=vh]"}},
		{"header_value_match and masked_remote_address", "/match", []string{"x-m", "gopher"}, 200, []string{"test [header_match=gets] [masked_remote_address=127.0.0.0/24]"}},
		{"no header match", "/match", []string{"x-m", "rust"}, 200, []string{"test [masked_remote_address=127.0.0.0/24]"}},
		{"per-route rate_limits, then the charge on stream done", "/perroute", []string{"x-a", "1", "x-cost", "7"}, 200,
			[]string{"other [a=1 +0]", "other [a=1 +7]"}},
		{"over the limit", "/skip", []string{"x-a", "1", "x-b", "over"}, 429, []string{"test [a=1 b=over]"}},
	}
	client := &http.Client{Timeout: 20 * time.Second}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+e.Addr("edge")+c.path, nil)
			for i := 0; i+1 < len(c.headers); i += 2 {
				req.Header.Set(c.headers[i], c.headers[i+1])
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e.Settle()
			if resp.StatusCode != c.status {
				t.Errorf("status %d %q, want %d", resp.StatusCode, body, c.status)
			}
			if limited := resp.Header.Get("x-envoy-ratelimited") == "true"; limited != (c.status == 429) || c.status == 429 && len(body) != 0 {
				t.Errorf("x-envoy-ratelimited %v, body %q: want the header and an empty body exactly on a 429", limited, body)
			}
			if got := rls.take(); strings.Join(got, "|") != strings.Join(c.asks, "|") {
				t.Errorf("asked %q, want %q", got, c.asks)
			}
		})
	}

}

// TestRefusesWhatItDoesNotEmulate: an unsupported part of a bootstrap is
// an error naming it, not a silent difference from Envoy.
func TestRefusesWhatItDoesNotEmulate(t *testing.T) {
	for name, change := range map[string][2]string{
		"an unknown filter":  {"envoy.filters.http.router\n                    typed_config:\n                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n    - name: app", "envoy.filters.http.router\n                    typed_config:\n                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors\n    - name: app"},
		"stage per route":    {"hits_addend: {number: 0}", "hits_addend: {number: 0}\n                                  stage: 1"},
		"an unknown command": {"%REQ(x-cost)%", "%BYTES_RECEIVED%"},
	} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(testBootstrap, change[0]) {
				t.Fatalf("the bootstrap has no %q", change[0])
			}
			b, err := envoyemu.Load([]byte(strings.Replace(testBootstrap, change[0], change[1], 1)))
			if err == nil {
				var e *envoyemu.Emulator
				e, err = envoyemu.Start(b, envoyemu.Options{Addrs: map[string]string{"0.0.0.0:10000": "127.0.0.1:0", "127.0.0.1:10001": "127.0.0.1:0"}})
				if err == nil {
					e.Close()
				}
			}
			if err == nil {
				t.Fatal("started; want an error naming what is not emulated")
			}
			t.Log(err)
		})
	}
}
