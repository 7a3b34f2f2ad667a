// Package deploy holds the deployment files of Sluice (Kubernetes manifests,
// Prometheus configuration and alert rules, the Grafana dashboard, the Envoy
// configuration example) and, in this test, the checks that keep them true to
// the code: every file parses, the Deployment's probes and ports match the
// flags of sluice serve, and every metric the dashboard and the alerts query
// is one the code registers, so renaming a metric fails here rather than in
// someone's dashboard. The Dockerfile, .dockerignore and docker-compose.yml at
// the repository root are checked here too.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/envoyrls"
)

// root is the repository root, relative to this package's directory.
const root = ".."

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(read(t, path)))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s holds no YAML document", path)
	}
	return docs
}

// decodeYAML decodes the single document of path (or the document of the
// given kind and name when the file holds several) into v.
func decodeYAML(t *testing.T, path, kind, name string, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(read(t, path)))
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: no %s %q", path, kind, name)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var meta struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		if err := node.Decode(&meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if kind == "" || (meta.Kind == kind && meta.Metadata.Name == name) {
			if err := node.Decode(v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return
		}
	}
}

// deployFiles are every YAML and JSON file this test covers.
func deployFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "docker-compose.yml")}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "templates" && filepath.Base(filepath.Dir(filepath.Dir(path))) == "helm" {
			return filepath.SkipDir // Helm templates: YAML only once rendered (helm_test.go)
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yml", ".yaml", ".json":
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestEveryFileParses(t *testing.T) {
	files := deployFiles(t)
	if len(files) < 10 {
		t.Fatalf("found only %d deployment files: %v", len(files), files)
	}
	for _, path := range files {
		if strings.HasSuffix(path, ".json") {
			var v any
			if err := json.Unmarshal(read(t, path), &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			continue
		}
		yamlDocs(t, path)
	}
}

// TestEnvoyConfigsLoad loads the Envoy rate limit example and the ConfigMap's
// files with the loader sluice serve uses, so they hold no unknown field or
// invalid rule.
func TestEnvoyConfigsLoad(t *testing.T) {
	cfg, err := envoyrls.LoadDir("envoy")
	if err != nil {
		t.Fatalf("deploy/envoy: %v", err)
	}
	if len(cfg.Domains()) == 0 {
		t.Fatal("deploy/envoy defines no domain")
	}

	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	decodeYAML(t, "kubernetes/envoy-configmap.yaml", "ConfigMap", "sluice-envoy", &cm)
	if len(cm.Data) == 0 {
		t.Fatal("the sluice-envoy ConfigMap holds no file")
	}
	dir := t.TempDir()
	for name, content := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmCfg, err := envoyrls.LoadDir(dir)
	if err != nil {
		t.Fatalf("ConfigMap sluice-envoy: %v", err)
	}
	if len(cmCfg.Domains()) != len(cm.Data) {
		t.Errorf("ConfigMap sluice-envoy: %d files but %d domains loaded", len(cm.Data), len(cmCfg.Domains()))
	}
}

// flagValue returns the value of --name=value or --name value in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// portOf is the port of a listen address such as ":8080".
func portOf(t *testing.T, addr string) string {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		t.Fatalf("listen address %q has no port", addr)
	}
	return addr[i+1:]
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
	Port          int    `yaml:"port"`
	TargetPort    string `yaml:"targetPort"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sDeployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot *bool `yaml:"runAsNonRoot"`
					RunAsUser    int   `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []struct {
					Name  string   `yaml:"name"`
					Image string   `yaml:"image"`
					Args  []string `yaml:"args"`
					Env   []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom *struct {
							SecretKeyRef *struct {
								Name string `yaml:"name"`
								Key  string `yaml:"key"`
							} `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					Ports          []k8sPort `yaml:"ports"`
					LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
					ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
					Resources      struct {
						Requests map[string]string `yaml:"requests"`
						Limits   map[string]string `yaml:"limits"`
					} `yaml:"resources"`
					SecurityContext struct {
						AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
						ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
						Capabilities             struct {
							Drop []string `yaml:"drop"`
						} `yaml:"capabilities"`
					} `yaml:"securityContext"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name   string `yaml:"name"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
						Items      []struct {
							Key  string `yaml:"key"`
							Path string `yaml:"path"`
						} `yaml:"items"`
					} `yaml:"secret"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sService struct {
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []k8sPort         `yaml:"ports"`
	} `yaml:"spec"`
}

func TestKubernetesDeployment(t *testing.T) {
	var d k8sDeployment
	decodeYAML(t, "kubernetes/deployment.yaml", "Deployment", "sluice", &d)
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2", d.Spec.Replicas)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not a pod label", k, v)
		}
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("args %v do not run sluice serve", c.Args)
	}

	// Each listener flag has a named container port with the same number.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for flag, name := range map[string]string{"addr": "http", "grpc-addr": "grpc", "metrics-addr": "metrics"} {
		v, ok := flagValue(c.Args, flag)
		if !ok {
			t.Errorf("--%s is not set", flag)
			continue
		}
		if got := portOf(t, v); got != itoa(ports[name]) {
			t.Errorf("--%s=%s but container port %q is %d", flag, v, name, ports[name])
		}
	}

	// Probes: liveness is the process, readiness the ability to answer
	// checks (503 while draining), both on the --addr listener.
	for _, pr := range []struct {
		what  string
		probe *k8sProbe
		path  string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if pr.probe == nil {
			t.Errorf("no %s", pr.what)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path {
			t.Errorf("%s path = %q, want %q", pr.what, pr.probe.HTTPGet.Path, pr.path)
		}
		if pr.probe.HTTPGet.Port != "http" && pr.probe.HTTPGet.Port != itoa(ports["http"]) {
			t.Errorf("%s port = %q, want the --addr port (http)", pr.what, pr.probe.HTTPGet.Port)
		}
	}

	// SIGTERM drains, then lets requests finish: the grace period must
	// cover both or the kubelet kills requests in flight.
	drain := durationFlag(t, c.Args, "drain-period", 5*time.Second)
	shutdown := durationFlag(t, c.Args, "shutdown-timeout", 15*time.Second)
	if grace := time.Duration(spec.TerminationGracePeriodSeconds) * time.Second; grace <= drain+shutdown {
		t.Errorf("terminationGracePeriodSeconds %v <= drain %v + shutdown %v", grace, drain, shutdown)
	}

	if spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot || spec.SecurityContext.RunAsUser == 0 {
		t.Error("the pod does not run as non-root (runAsNonRoot: true, runAsUser non-zero)")
	}
	sc := c.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("capabilities do not drop ALL")
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v lack cpu and memory requests or a memory limit", c.Resources)
	}

	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			soft, limit := quantity(t, e.Value), quantity(t, c.Resources.Limits["memory"])
			if soft <= 0 || soft >= limit {
				t.Errorf("GOMEMLIMIT %s is not below the memory limit %s", e.Value, c.Resources.Limits["memory"])
			}
		}
	}

	// The admin token is a file from a Secret, never a value in the manifest.
	tokenFile, ok := flagValue(c.Args, "admin-token-file")
	if !ok {
		t.Fatal("--admin-token-file is not set")
	}
	if _, ok := flagValue(c.Args, "admin-token"); ok {
		t.Error("--admin-token puts the token in the manifest; use --admin-token-file")
	}
	for _, e := range c.Env {
		if e.Name == "SLUICE_ADMIN_TOKEN" {
			t.Error("SLUICE_ADMIN_TOKEN puts the token in the manifest; use --admin-token-file")
		}
		if e.Name == "SLUICE_DATABASE" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Error("SLUICE_DATABASE (it holds a password) is not taken from a Secret")
		}
	}
	volumes := map[string]int{}
	for i, v := range spec.Volumes {
		volumes[v.Name] = i
	}
	mountedFrom := func(path string) (volume string, rest string) {
		for _, m := range c.VolumeMounts {
			if r, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/"); ok {
				return m.Name, r
			}
		}
		return "", ""
	}
	vol, rest := mountedFrom(tokenFile)
	if i, ok := volumes[vol]; !ok || spec.Volumes[i].Secret == nil {
		t.Errorf("--admin-token-file %s is not on a Secret volume", tokenFile)
	} else {
		s := spec.Volumes[i].Secret
		found := len(s.Items) == 0
		for _, it := range s.Items {
			found = found || it.Path == rest
		}
		if !found {
			t.Errorf("--admin-token-file %s: the Secret %s mounts no item at %s", tokenFile, s.SecretName, rest)
		}
	}
	envoyDir, _ := flagValue(c.Args, "envoy-config")
	vol, _ = mountedFrom(envoyDir + "/x")
	if i, ok := volumes[vol]; !ok || spec.Volumes[i].ConfigMap == nil || spec.Volumes[i].ConfigMap.Name != "sluice-envoy" {
		t.Errorf("--envoy-config %s is not the sluice-envoy ConfigMap", envoyDir)
	}

	// Services select the pods and name container ports that exist.
	var services []k8sService
	for _, name := range []string{"sluice", "sluice-grpc", "sluice-metrics"} {
		var s k8sService
		decodeYAML(t, "kubernetes/service.yaml", "Service", name, &s)
		services = append(services, s)
		for k, v := range s.Spec.Selector {
			if d.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, which the pods do not have", name, k, v)
			}
		}
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort]; !ok {
				t.Errorf("Service %s port %s targets %q, not a container port name", name, p.Name, p.TargetPort)
			}
		}
	}
	svcPorts := func(s k8sService) (names []string) {
		for _, p := range s.Spec.Ports {
			names = append(names, p.Name)
		}
		return names
	}
	if got := svcPorts(services[0]); !slices.Contains(got, "http") || !slices.Contains(got, "grpc") || slices.Contains(got, "metrics") {
		t.Errorf("Service sluice has ports %v, want http and grpc, not metrics", got)
	}

	// The ServiceMonitor scrapes the metrics Service's metrics port.
	var sm struct {
		APIVersion string `yaml:"apiVersion"`
		Spec       struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	decodeYAML(t, "kubernetes/servicemonitor.yaml", "ServiceMonitor", "sluice", &sm)
	if sm.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %q", sm.APIVersion)
	}
	var selected []string
	for _, s := range services {
		match := true
		for k, v := range sm.Spec.Selector.MatchLabels {
			match = match && s.Metadata.Labels[k] == v
		}
		if match {
			selected = append(selected, s.Metadata.Name)
		}
	}
	if !slices.Equal(selected, []string{"sluice-metrics"}) {
		t.Errorf("the ServiceMonitor selects Services %v, want [sluice-metrics]", selected)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want port metrics, path /metrics", sm.Spec.Endpoints)
	}

	var pdb struct {
		Spec struct {
			MinAvailable int `yaml:"minAvailable"`
			Selector     struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
	decodeYAML(t, "kubernetes/pdb.yaml", "PodDisruptionBudget", "sluice", &pdb)
	if pdb.Spec.MinAvailable < 1 || pdb.Spec.MinAvailable >= d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget minAvailable %d: want at least 1 and fewer than the %d replicas", pdb.Spec.MinAvailable, d.Spec.Replicas)
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if d.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the PodDisruptionBudget selects %s=%s, which the pods do not have", k, v)
		}
	}

	// kustomization.yaml lists every manifest of the directory.
	var k struct {
		Resources []string `yaml:"resources"`
	}
	decodeYAML(t, "kubernetes/kustomization.yaml", "", "", &k)
	entries, err := os.ReadDir("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "kustomization.yaml" && !slices.Contains(k.Resources, e.Name()) {
			t.Errorf("kustomization.yaml does not list %s", e.Name())
		}
	}
}

func durationFlag(t *testing.T, args []string, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := flagValue(args, name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("--%s=%s: %v", name, v, err)
	}
	return d
}

// quantity reads a memory size in the binary units Kubernetes (Mi, Gi) and
// Go's GOMEMLIMIT (MiB, GiB) use.
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			var v int64
			if err := json.Unmarshal([]byte(n), &v); err != nil {
				t.Fatalf("memory size %q: %v", s, err)
			}
			return v * u.mult
		}
	}
	t.Fatalf("memory size %q has no binary unit (Mi, Gi, MiB, GiB)", s)
	return 0
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestCompose(t *testing.T) {
	var c struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Secrets     []string          `yaml:"secrets"`
			Volumes     []string          `yaml:"volumes"`
			StopGrace   string            `yaml:"stop_grace_period"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
	}
	decodeYAML(t, filepath.Join(root, "docker-compose.yml"), "", "", &c)
	var instances []string
	for name, s := range c.Services {
		if len(s.Command) == 0 || s.Command[0] != "serve" {
			continue
		}
		instances = append(instances, name)
		for _, f := range []string{"redis", "grpc-addr", "metrics-addr", "admin-token-file", "envoy-config"} {
			if _, ok := flagValue(s.Command, f); !ok {
				t.Errorf("%s: --%s is not set", name, f)
			}
		}
		if redis, _ := flagValue(s.Command, "redis"); !strings.HasPrefix(redis, "redis://redis:6379/") {
			t.Errorf("%s: --redis=%s, want the compose redis service", name, redis)
		}
		if db := s.Environment["SLUICE_DATABASE"]; !strings.HasPrefix(db, "postgres://") || !strings.Contains(db, "${POSTGRES_PASSWORD") {
			t.Errorf("%s: SLUICE_DATABASE %q is not the compose PostgreSQL with the password from .env", name, db)
		}
		tokenFile, _ := flagValue(s.Command, "admin-token-file")
		secret, ok := strings.CutPrefix(tokenFile, "/run/secrets/")
		if !ok || !slices.Contains(s.Secrets, secret) {
			t.Errorf("%s: --admin-token-file %s is not one of its secrets %v", name, tokenFile, s.Secrets)
		}
		if _, ok := c.Secrets[secret]; !ok {
			t.Errorf("%s: secret %q is not declared", name, secret)
		}
		grace, err := time.ParseDuration(s.StopGrace)
		if err != nil || grace <= durationFlag(t, s.Command, "drain-period", 5*time.Second)+durationFlag(t, s.Command, "shutdown-timeout", 15*time.Second) {
			t.Errorf("%s: stop_grace_period %q does not cover the drain period and shutdown timeout", name, s.StopGrace)
		}
	}
	slices.Sort(instances)
	if len(instances) != 2 {
		t.Fatalf("sluice serve instances %v, want 2", instances)
	}
	for _, s := range c.Secrets {
		if !strings.HasPrefix(s.File, "./secrets/") {
			t.Errorf("secret file %s is outside ./secrets/, which .gitignore keeps out of the repository", s.File)
		}
	}
	if !regexp.MustCompile(`(?m)^/secrets/$`).Match(read(t, filepath.Join(root, ".gitignore"))) {
		t.Error(".gitignore does not exclude /secrets/")
	}
	for _, s := range []string{"redis", "postgres", "prometheus"} {
		if _, ok := c.Services[s]; !ok {
			t.Errorf("no %s service", s)
		}
	}

	// Prometheus scrapes each instance's metrics listener and loads the
	// alert rules mounted from deploy/prometheus/alerts.yml.
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	decodeYAML(t, "prometheus/prometheus.yml", "", "", &prom)
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName == "sluice" {
			for _, st := range sc.StaticConfigs {
				targets = append(targets, st.Targets...)
			}
		}
	}
	for _, name := range instances {
		addr, _ := flagValue(c.Services[name].Command, "metrics-addr")
		want := name + ":" + portOf(t, addr)
		if !slices.Contains(targets, want) {
			t.Errorf("the sluice job scrapes %v, not %s", targets, want)
		}
	}
	mounts := map[string]string{}
	for _, v := range c.Services["prometheus"].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			mounts[parts[1]] = parts[0]
		}
	}
	if len(prom.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule_files")
	}
	for _, rf := range prom.RuleFiles {
		if mounts[rf] != "./deploy/prometheus/alerts.yml" {
			t.Errorf("rule file %s is not deploy/prometheus/alerts.yml mounted (mounts %v)", rf, mounts)
		}
	}
}

// registeredMetrics greps the metric names the code registers, so a
// renamed metric fails the tests below.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "cmd", "sluice", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	metricsFiles, err := filepath.Glob(filepath.Join(root, "metrics", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, metricsFiles...)
	re := regexp.MustCompile(`Name:\s*"(sluice_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range re.FindAllSubmatch(read(t, f), -1) {
			names[string(m[1])] = true
		}
	}
	// The documented families (docs/service.md); fewer means the grep broke.
	if len(names) < 10 {
		t.Fatalf("found only %d registered metric names (%v): has the registration code moved?", len(names), names)
	}
	return names
}

// knownResults greps the result label values of sluice_decisions_total.
func knownResults(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*Result[A-Za-z]+\s*=\s*"([a-z_]+)"`)
	results := map[string]bool{}
	for _, m := range re.FindAllSubmatch(read(t, filepath.Join(root, "metrics", "metrics.go")), -1) {
		results[string(m[1])] = true
	}
	if len(results) < 5 {
		t.Fatalf("found only %d results (%v) in metrics/metrics.go", len(results), results)
	}
	return results
}

// queries are the PromQL expressions of the alerts and of the dashboard
// (panel targets and template variable queries), by where they are.
func queries(t *testing.T) map[string]string {
	t.Helper()
	q := map[string]string{}
	var alerts struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeYAML(t, "prometheus/alerts.yml", "", "", &alerts)
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			q["alerts.yml "+r.Alert] = r.Expr
		}
	}
	var dash any
	if err := json.Unmarshal(read(t, "grafana/sluice.json"), &dash); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if s, ok := child.(string); ok && (k == "expr" || k == "definition") {
					q["sluice.json "+path+"."+k] = s
				}
				walk(path+"."+k, child)
			}
		case []any:
			for i, child := range v {
				walk(path+"["+itoa(i)+"]", child)
			}
		}
	}
	walk("", dash)
	return q
}

var (
	metricRef = regexp.MustCompile(`\b(sluice_[a-zA-Z0-9_]+)`)
	resultRef = regexp.MustCompile(`result\s*(=~|!~|=|!=)\s*"([^"]*)"`)
	upRef     = regexp.MustCompile(`\bup\b`)
)

func TestQueriesUseRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	results := knownResults(t)
	q := queries(t)
	var alertCount, dashCount int
	used := map[string]bool{}
	for where, expr := range q {
		if strings.HasPrefix(where, "alerts.yml") {
			alertCount++
		} else {
			dashCount++
		}
		refs := metricRef.FindAllStringSubmatch(expr, -1)
		if len(refs) == 0 && !upRef.MatchString(expr) {
			t.Errorf("%s: %q references no Sluice metric", where, expr)
		}
		for _, m := range refs {
			name := m[1]
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] && strings.HasSuffix(b, "_seconds") {
					base = b
				}
			}
			if !registered[base] {
				t.Errorf("%s: %s is not a metric the code registers", where, name)
			}
			used[base] = true
		}
		for _, m := range resultRef.FindAllStringSubmatch(expr, -1) {
			for _, r := range strings.Split(m[2], "|") {
				if r != ".*" && !results[r] {
					t.Errorf("%s: result %q is not a result of sluice_decisions_total (%v)", where, r, results)
				}
			}
		}
	}
	if alertCount < 5 || dashCount < 10 {
		t.Fatalf("found %d alert and %d dashboard queries: has the layout of the files changed?", alertCount, dashCount)
	}
	// The dashboard is the place to look for every metric: one missing is
	// probably a new metric nobody charted.
	for name := range registered {
		if !used[name] {
			t.Errorf("metric %s is registered but neither charted nor alerted on", name)
		}
	}
}

// TestPromtool checks the alert rules and the compose Prometheus
// configuration with promtool when it is installed (Debian package
// prometheus; scripts/ensure-test-deps.sh tries to install it). Without it
// the parse and metric-name tests above are all that check these files.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (Debian: apt-get install prometheus): alerts.yml and prometheus.yml were only parsed as YAML and their metric names checked, not validated as Prometheus rules and configuration")
		return
	}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s: ok", strings.Join(args, " "))
		}
	}
	run("check", "rules", "prometheus/alerts.yml")
	if _, err := os.Stat("prometheus/alerts_test.yml"); err == nil {
		run("test", "rules", "prometheus/alerts_test.yml")
	}
	// prometheus.yml loads the rules from where compose mounts them; check
	// it beside a copy of them.
	dir := t.TempDir()
	cfg := strings.ReplaceAll(string(read(t, "prometheus/prometheus.yml")), "/etc/prometheus/alerts.yml", "alerts.yml")
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), read(t, "prometheus/alerts.yml"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "config", filepath.Join(dir, "prometheus.yml"))
}

// TestDockerfile checks the Dockerfile's shape without a Docker engine
// (none runs in CI): a golang:1.26 builder making a static, trimmed binary
// with the version stamped, and a final stage that is not the builder and
// runs sluice serve as a non-root user with the service's ports exposed.
func TestDockerfile(t *testing.T) {
	text := string(read(t, filepath.Join(root, "Dockerfile")))
	// Join continuation lines, drop comments.
	text = strings.ReplaceAll(text, "\\\n", " ")
	var froms []string
	last := map[string]string{} // instruction -> its last value (in the final stage)
	var exposed []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		instr = strings.ToUpper(instr)
		rest = strings.TrimSpace(rest)
		switch instr {
		case "FROM":
			froms = append(froms, rest)
			last = map[string]string{}
			exposed = nil
		case "EXPOSE":
			exposed = append(exposed, strings.Fields(rest)...)
		}
		last[instr] = rest
		if instr == "RUN" && strings.Contains(rest, "go build") {
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=", "-X main.revision="} {
				if !strings.Contains(rest, want) {
					t.Errorf("the go build step lacks %s: %s", want, rest)
				}
			}
			last["GOBUILD"] = rest
		}
	}
	if len(froms) < 2 {
		t.Fatalf("FROM lines %v: want a multi-stage build", froms)
	}
	if !strings.Contains(froms[0], "golang:1.26") {
		t.Errorf("the builder is %q, want golang:1.26", froms[0])
	}
	if final := froms[len(froms)-1]; strings.Contains(final, "golang") {
		t.Errorf("the final stage is %q, the builder image", final)
	}
	if !strings.Contains(text, "go build") {
		t.Error("no go build step")
	}
	user := last["USER"]
	if uid, _, _ := strings.Cut(user, ":"); user == "" || uid == "root" || uid == "0" {
		t.Errorf("the final stage runs as %q, want a non-root user", user)
	}
	var entry, cmd []string
	if err := json.Unmarshal([]byte(last["ENTRYPOINT"]), &entry); err != nil || len(entry) != 1 || filepath.Base(entry[0]) != "sluice" {
		t.Errorf("ENTRYPOINT %s, want [\".../sluice\"] in exec form", last["ENTRYPOINT"])
	}
	if err := json.Unmarshal([]byte(last["CMD"]), &cmd); err != nil || !slices.Equal(cmd, []string{"serve"}) {
		t.Errorf("CMD %s, want [\"serve\"]", last["CMD"])
	}
	// Envoy Gateway, Istio and Contour start envoyproxy/ratelimit's image
	// as /bin/ratelimit: the same binary must be there, from the build.
	if !regexp.MustCompile(`(?m)^COPY --from=build /out/sluice /bin/ratelimit$`).MatchString(text) {
		t.Error("the final stage does not COPY the binary to /bin/ratelimit, the command Envoy Gateway, Istio and Contour start envoyproxy/ratelimit's image with")
	}
	for _, p := range []string{"8080", "8081", "9090"} {
		if !slices.Contains(exposed, p) {
			t.Errorf("EXPOSE %v lacks %s", exposed, p)
		}
	}
	// The -X targets exist.
	if !regexp.MustCompile(`(?m)^var version, revision string`).Match(read(t, filepath.Join(root, "cmd", "sluice", "version.go"))) {
		t.Error("cmd/sluice/version.go no longer declares var version, revision string, which -ldflags -X main.version/main.revision set")
	}

	// .dockerignore must keep secrets and .git out of the context, and
	// exclude no directory the binary is built from.
	ignore := strings.Fields(string(read(t, filepath.Join(root, ".dockerignore"))))
	for _, want := range []string{".git", "/secrets/", ".env"} {
		if !slices.Contains(ignore, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	for _, pattern := range ignore {
		if strings.HasPrefix(pattern, "#") || !strings.HasSuffix(pattern, "/") {
			continue
		}
		dir := filepath.Join(root, strings.Trim(pattern, "/"))
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				t.Errorf(".dockerignore excludes %s, which holds Go source (%s)", pattern, path)
			}
			return nil
		})
	}

	// make image builds it; make test does not (no Docker engine in CI).
	mk := string(read(t, filepath.Join(root, "Makefile")))
	if !regexp.MustCompile(`(?m)^image:`).MatchString(mk) || !strings.Contains(mk, "docker build") {
		t.Error("the Makefile has no image target running docker build")
	}
	if m := regexp.MustCompile(`(?m)^test:(.*)$`).FindStringSubmatch(mk); m != nil && strings.Contains(m[1], "image") {
		t.Error("make test depends on make image, which needs a Docker engine")
	}
}
