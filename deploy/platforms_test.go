package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	yamlv3 "gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/sluicelabs/sluice/envoyrls"
)

// manifest is one file's Kubernetes objects: the core ones decoded strictly
// with the Kubernetes Go types, the custom resources (Istio's EnvoyFilter,
// Contour's ExtensionService) as plain maps.
type manifest struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	secrets     []corev1.Secret
	pdbs        []policyv1.PodDisruptionBudget
	custom      []map[string]any
}

func loadManifest(t *testing.T, path string) manifest {
	t.Helper()
	return decodeManifest(t, path, read(t, path))
}

// decodeManifest decodes the objects of data, named path in errors.
func decodeManifest(t *testing.T, path string, data []byte) manifest {
	t.Helper()
	var m manifest
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	for {
		var node map[string]any
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if node == nil {
			continue
		}
		raw, err := json.Marshal(node)
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(raw, &tm); err != nil {
			t.Fatal(err)
		}
		strict := func(into any) {
			if err := k8syaml.UnmarshalStrict(raw, into); err != nil {
				t.Fatalf("%s: %s %v: %v", path, tm.Kind, node["metadata"], err)
			}
		}
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			var d appsv1.Deployment
			strict(&d)
			m.deployments = append(m.deployments, d)
		case "v1 Service":
			var s corev1.Service
			strict(&s)
			m.services = append(m.services, s)
		case "v1 ConfigMap":
			var c corev1.ConfigMap
			strict(&c)
			m.configMaps = append(m.configMaps, c)
		case "v1 Secret":
			var sec corev1.Secret
			strict(&sec)
			m.secrets = append(m.secrets, sec)
		case "policy/v1 PodDisruptionBudget":
			var pdb policyv1.PodDisruptionBudget
			strict(&pdb)
			m.pdbs = append(m.pdbs, pdb)
		case "networking.istio.io/v1alpha3 EnvoyFilter", "projectcontour.io/v1alpha1 ExtensionService",
			"monitoring.coreos.com/v1 ServiceMonitor", "monitoring.coreos.com/v1 PrometheusRule":
			m.custom = append(m.custom, node)
		default:
			t.Fatalf("%s: an object of kind %s %s the test does not know", path, tm.APIVersion, tm.Kind)
		}
	}
	return m
}

// checkRatelimitDeployment checks a Deployment that runs Sluice where
// envoyproxy/ratelimit ran: its image is Sluice's, started as
// /bin/ratelimit, configured by envoyproxy/ratelimit's variables alone
// (each one Sluice reads, none refused), as uid 65534 on a read-only root,
// probed on GET /healthcheck, with its configuration directory
// (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config) the mounted ConfigMap, whose
// files load. It returns the domains of that configuration.
func checkRatelimitDeployment(t *testing.T, m manifest, d appsv1.Deployment) []string {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", d.Name, len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "sluice" || !slices.Equal(c.Command, []string{"/bin/ratelimit"}) {
		t.Errorf("%s runs image %q with command %q, want sluice as /bin/ratelimit", d.Name, c.Image, c.Command)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	known := map[string]bool{}
	for _, row := range envoyrls.EnvTable {
		for _, v := range row.Vars {
			known[v] = true
		}
	}
	for name := range env {
		if !known[name] {
			t.Errorf("%s sets %s, which is not one of envoyproxy/ratelimit's variables", d.Name, name)
		}
	}
	if _, err := envoyrls.ApplyEnvAsRatelimit(anyFlags{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Errorf("%s: Sluice refuses its variables: %v", d.Name, err)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65534 {
		t.Errorf("%s does not run as uid 65534", d.Name)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s has a writable root: ENV mode writes nothing, so it need not", d.Name)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthcheck" || p.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("%s's readiness probe is not GET /healthcheck on 8080", d.Name)
	}
	configDir := filepath.Join(env["RUNTIME_ROOT"], env["RUNTIME_SUBDIRECTORY"], "config")
	var volume string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == configDir {
			volume = vm.Name
		}
	}
	if volume == "" {
		t.Fatalf("%s mounts nothing at %s, its configuration directory", d.Name, configDir)
	}
	var cmName string
	for _, v := range spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	for _, cm := range m.configMaps {
		if cm.Name != cmName {
			continue
		}
		dir := t.TempDir()
		for name, text := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cfg, err := envoyrls.LoadDir(dir)
		if err != nil {
			t.Fatalf("%s: ConfigMap %s does not load: %v", d.Name, cm.Name, err)
		}
		return cfg.Domains()
	}
	t.Fatalf("%s mounts ConfigMap %q, which the manifest does not hold", d.Name, cmName)
	return nil
}

// anyFlags takes every flag envoyrls.ApplyEnvAsRatelimit sets: the test asks
// whether Sluice accepts the variables, not which flags they set
// (cmd/sluice's tests do).
type anyFlags struct{}

func (anyFlags) Has(string) bool                    { return true }
func (anyFlags) Changed(string) bool                { return false }
func (anyFlags) Check(string, string) (bool, error) { return true, nil }
func (anyFlags) Set(string, string) error           { return nil }

// TestIstioManifests: Istio's rate limit sample with Sluice's image, and
// Istio's EnvoyFilter asking its Service's gRPC port for its domain.
func TestIstioManifests(t *testing.T) {
	m := loadManifest(t, filepath.Join("istio", "ratelimit.yaml"))
	var domains []string
	for _, d := range m.deployments {
		if d.Name == "ratelimit" {
			domains = checkRatelimitDeployment(t, m, d)
		}
	}
	if domains == nil {
		t.Fatal("no ratelimit Deployment")
	}
	if !servesGRPC(m, "ratelimit", 8081) {
		t.Error("no Service ratelimit with the gRPC port 8081")
	}
	f := loadManifest(t, filepath.Join("istio", "envoyfilter.yaml"))
	if len(f.custom) != 1 {
		t.Fatalf("envoyfilter.yaml holds %d objects, want the EnvoyFilter", len(f.custom))
	}
	patches := dig(f.custom[0], "spec", "configPatches").([]any)
	filter := decodeRateLimitFilter(t, dig(patches[0].(map[string]any), "patch", "value", "typed_config"))
	if !slices.Contains(domains, filter.GetDomain()) {
		t.Errorf("the EnvoyFilter asks for domain %q; the ConfigMap has %v", filter.GetDomain(), domains)
	}
	if cluster := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); cluster != "outbound|8081||ratelimit.default.svc.cluster.local" {
		t.Errorf("the EnvoyFilter's cluster is %q, not the ratelimit Service's gRPC port", cluster)
	}
}

// TestContourManifests: the Deployment, its Service and the
// ExtensionService Contour's rateLimitService names.
func TestContourManifests(t *testing.T) {
	m := loadManifest(t, filepath.Join("contour", "ratelimit.yaml"))
	if len(m.deployments) != 1 {
		t.Fatalf("%d Deployments", len(m.deployments))
	}
	domains := checkRatelimitDeployment(t, m, m.deployments[0])
	if !slices.Contains(domains, "contour") {
		t.Errorf("the configuration's domains %v lack contour, the domain Contour's rateLimitService sends", domains)
	}
	if !servesGRPC(m, "ratelimit", 8081) {
		t.Error("no Service ratelimit with port 8081")
	}
	if len(m.custom) != 1 {
		t.Fatalf("want the ExtensionService, got %d custom objects", len(m.custom))
	}
	es := m.custom[0]
	svc := dig(es, "spec", "services").([]any)[0].(map[string]any)
	if dig(es, "spec", "protocol") != "h2c" || svc["name"] != "ratelimit" || svc["port"] != 8081 {
		t.Errorf("the ExtensionService %v does not name the ratelimit Service's gRPC port over h2c", es["spec"])
	}
}

// TestEnvoyGatewayConfig: Envoy Gateway's own configuration with the rate
// limit Deployment's image replaced by Sluice's.
func TestEnvoyGatewayConfig(t *testing.T) {
	m := loadManifest(t, filepath.Join("envoy-gateway", "envoy-gateway-config.yaml"))
	if len(m.configMaps) != 1 || m.configMaps[0].Name != "envoy-gateway-config" {
		t.Fatalf("want Envoy Gateway's ConfigMap envoy-gateway-config, got %d ConfigMaps", len(m.configMaps))
	}
	var eg map[string]any
	if err := yamlv3.Unmarshal([]byte(m.configMaps[0].Data["envoy-gateway.yaml"]), &eg); err != nil {
		t.Fatal(err)
	}
	if eg["apiVersion"] != "gateway.envoyproxy.io/v1alpha1" || eg["kind"] != "EnvoyGateway" {
		t.Fatalf("envoy-gateway.yaml is %v %v, want an EnvoyGateway", eg["apiVersion"], eg["kind"])
	}
	if img := dig(eg, "provider", "kubernetes", "rateLimitDeployment", "container", "image"); img != "sluice" {
		t.Errorf("the rate limit Deployment's image is %v, want Sluice's", img)
	}
	if url, _ := dig(eg, "rateLimit", "backend", "redis", "url").(string); url == "" {
		t.Error("no Redis URL: Envoy Gateway deploys its rate limit service only with a backend")
	}
}

func servesGRPC(m manifest, name string, port int32) bool {
	for _, s := range m.services {
		if s.Name != name {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Port == port {
				return true
			}
		}
	}
	return false
}

func decodeRateLimitFilter(t *testing.T, typedConfig any) *ratelimitfilterv3.RateLimit {
	t.Helper()
	cfg, ok := typedConfig.(map[string]any)
	if !ok || cfg["@type"] != "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit" {
		t.Fatalf("typed_config %v is not Envoy's rate limit filter", typedConfig)
	}
	body := map[string]any{}
	for k, v := range cfg {
		if k != "@type" {
			body[k] = v
		}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	var f ratelimitfilterv3.RateLimit
	if err := protojson.Unmarshal(raw, &f); err != nil {
		t.Fatalf("the rate limit filter's typed_config: %v", err)
	}
	if err := f.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	return &f
}

// dig walks nested maps by keys; nil when a key is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[strings.TrimSpace(k)]
	}
	return v
}
