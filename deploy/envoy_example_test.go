package deploy

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// The typed configurations the bootstrap names, so its Anys resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/sluicelabs/sluice/envoyrls"
)

// exampleDir is the Envoy example: an Envoy bootstrap, Sluice's rate limit
// configuration and a compose stack of the two and Redis.
var exampleDir = filepath.Join(root, "examples", "envoy")

// loadBootstrap decodes a YAML Envoy bootstrap strictly, with
// go-control-plane's types (unknown fields and unknown typed configs are
// errors), and validates it as Envoy's own proto constraints say.
func loadBootstrap(t *testing.T, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	docs := yamlDocs(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", path, len(docs))
	}
	raw, err := json.Marshal(docs[0])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(raw, &b); err != nil {
		t.Fatalf("%s is not an Envoy v3 bootstrap: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &b
}

// TestEnvoyExample keeps examples/envoy true: the bootstrap is a valid Envoy
// v3 bootstrap; its rate limit filter asks Sluice's gRPC port for the domain
// of Sluice's configuration file; every descriptor its routes send matches a
// rule of that file; the token budget is checked with hits_addend 0 and
// charged on stream done; and the compose file runs Sluice as
// envoyproxy/ratelimit's image is run, configured by its variables alone.
func TestEnvoyExample(t *testing.T) {
	b := loadBootstrap(t, filepath.Join(exampleDir, "envoy.yaml"))
	cfg, err := envoyrls.LoadDir(filepath.Join(exampleDir, "ratelimit", "config"))
	if err != nil {
		t.Fatal(err)
	}

	var filter *ratelimitfilterv3.RateLimit
	var policies []*routev3.RateLimit
	budgetChecked, budgetCharged := false, false
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("listener %s: %v", l.GetName(), err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetName() == "envoy.filters.http.ratelimit" {
						filter = &ratelimitfilterv3.RateLimit{}
						if err := hf.GetTypedConfig().UnmarshalTo(filter); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					policies = append(policies, vh.GetRateLimits()...)
					for _, r := range vh.GetRoutes() {
						for _, p := range r.GetRoute().GetRateLimits() {
							policies = append(policies, p)
							if p.GetHitsAddend() != nil {
								t.Errorf("route %s: hits_addend in a route's rate_limits, where Envoy ignores it (it reads it in RateLimitPerRoute)", r.GetMatch().GetPrefix())
							}
						}
						perRoute := &ratelimitfilterv3.RateLimitPerRoute{}
						if a := r.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; a != nil {
							if err := a.UnmarshalTo(perRoute); err != nil {
								t.Fatal(err)
							}
						}
						for _, p := range perRoute.GetRateLimits() {
							policies = append(policies, p)
							if p.GetHitsAddend().GetNumber().GetValue() == 0 && p.GetHitsAddend().GetNumber() != nil {
								budgetChecked = true
							}
							// Envoy formats hits_addend with the request's
							// headers alone: a response's figure comes
							// through dynamic metadata.
							if p.GetApplyOnStreamDone() && strings.HasPrefix(p.GetHitsAddend().GetFormat(), "%DYNAMIC_METADATA(") {
								budgetCharged = true
							}
						}
					}
				}
			}
		}
	}
	if filter == nil {
		t.Fatal("the bootstrap has no envoy.filters.http.ratelimit filter")
	}
	domain := cfg.Domain(filter.GetDomain())
	if domain == nil {
		t.Fatalf("the rate limit filter's domain %q is none of the configuration's %v", filter.GetDomain(), cfg.Domains())
	}
	if !budgetChecked || !budgetCharged {
		t.Errorf("the token budget route lacks its check with hits_addend 0 (%v) or its charge on stream done from the response, through dynamic metadata (%v)", budgetChecked, budgetCharged)
	}
	if len(policies) < 4 {
		t.Fatalf("found %d rate limit policies in the bootstrap, want the example's 4", len(policies))
	}
	// Each policy's descriptor, with a sample value for each entry, matches a
	// rule (a descriptor that matches none is never limited: a silent typo).
	for i, p := range policies {
		var entries []*ratelimitv3.RateLimitDescriptor_Entry
		for _, a := range p.GetActions() {
			switch {
			case a.GetRemoteAddress() != nil:
				entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: "192.0.2.1"})
			case a.GetRequestHeaders() != nil:
				entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "ada"})
			case a.GetGenericKey() != nil:
				entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: a.GetGenericKey().GetDescriptorKey(), Value: a.GetGenericKey().GetDescriptorValue()})
			default:
				t.Fatalf("policy %d: an action the test does not know: %v", i, a)
			}
		}
		if _, ok := domain.Match(entries); !ok {
			t.Errorf("policy %d sends %v, which matches no rule of domain %q", i, entries, domain.Name)
		}
	}
	var grpcPort uint32
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() {
			continue
		}
		for _, e := range c.GetLoadAssignment().GetEndpoints() {
			for _, lb := range e.GetLbEndpoints() {
				addr := lb.GetEndpoint().GetAddress().GetSocketAddress()
				if addr.GetAddress() != "sluice" {
					t.Errorf("the rate limit cluster dials %s, not the compose service sluice", addr.GetAddress())
				}
				grpcPort = addr.GetPortValue()
			}
		}
		if c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] == nil {
			t.Error("the rate limit cluster does not speak HTTP/2, which gRPC needs")
		}
	}
	if grpcPort != 8081 {
		t.Errorf("the rate limit cluster dials port %d; /bin/ratelimit serves gRPC on envoyproxy/ratelimit's 8081", grpcPort)
	}

	compose := yamlDocs(t, filepath.Join(exampleDir, "docker-compose.yml"))[0]
	services, _ := compose["services"].(map[string]any)
	sl, _ := services["sluice"].(map[string]any)
	if sl == nil || services["envoy"] == nil || services["redis"] == nil {
		t.Fatalf("the compose file's services are %v, want envoy, sluice and redis", keys(services))
	}
	if cmd := strings.Join(toStrings(sl["command"]), " "); cmd != "/bin/ratelimit" {
		t.Errorf("sluice's command is %q, want /bin/ratelimit, as envoyproxy/ratelimit's image is run", cmd)
	}
	if sl["read_only"] != true || sl["user"] != "65534:65534" {
		t.Errorf("sluice runs with read_only %v as user %v, want a read-only root as 65534", sl["read_only"], sl["user"])
	}
	known := map[string]bool{}
	for _, row := range envoyrls.EnvTable {
		for _, v := range row.Vars {
			known[v] = true
		}
	}
	env, _ := sl["environment"].(map[string]any)
	for name := range env {
		if !known[name] {
			t.Errorf("sluice's environment sets %s, which is not one of envoyproxy/ratelimit's variables: ENV mode is configured by those alone", name)
		}
	}
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config is the mounted ratelimit/config.
	dir := filepath.Join(env["RUNTIME_ROOT"].(string), env["RUNTIME_SUBDIRECTORY"].(string))
	if !slices.Contains(toStrings(sl["volumes"]), "./ratelimit:"+dir+":ro") {
		t.Errorf("sluice's volumes %v do not mount ./ratelimit at %s, where RUNTIME_ROOT and RUNTIME_SUBDIRECTORY point", sl["volumes"], dir)
	}
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
