package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8syaml "sigs.k8s.io/yaml"
)

// helmModule is the helm the chart is tested with, built from its Go module
// (pinned like staticcheck in the Makefile), so no helm install is needed.
const helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"

const chart = "helm/sluice"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
	helmOut  []byte
)

// helm runs helm with args and returns what it printed; the first call
// builds it (once per test binary; the Go build cache keeps it after).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helmOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-helm-")
		if err != nil {
			helmErr = err
			return
		}
		install := exec.Command("go", "install", helmModule)
		install.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		helmOut, helmErr = install.CombinedOutput()
		helmPath = filepath.Join(dir, "helm")
	})
	if helmErr != nil {
		t.Fatalf("go install %s: %v\n%s", helmModule, helmErr, helmOut)
	}
	cmd := exec.Command(helmPath, args...)
	// A private home, so no user's repositories or plugins take part.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// render is helm template of the chart with a values file (none: the
// defaults) and --set pairs, decoded strictly with the Kubernetes Go types.
func render(t *testing.T, values string, set ...string) manifest {
	t.Helper()
	args := []string{"template", "r", chart}
	if values != "" {
		args = append(args, "-f", values)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// helm notes symbolic links (files/ links to the alert rules and the
	// dashboard) on stderr, mixed in here: keep the documents.
	var docs []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "found symbolic link in path") {
			docs = append(docs, line)
		}
	}
	return decodeManifest(t, "helm template "+values, []byte(strings.Join(docs, "\n")))
}

// ciValues are the chart's test values (helm's ci/ convention).
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("the chart's ci/ values: %v, %v", files, err)
	}
	return files
}

func TestHelmLint(t *testing.T) {
	for _, values := range ciValues(t) {
		if out, err := helm(t, "lint", "--strict", chart, "-f", values); err != nil {
			t.Errorf("helm lint --strict -f %s: %v\n%s", values, err, out)
		}
	}
}

func container(t *testing.T, m manifest) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	if len(m.deployments) != 1 || len(m.deployments[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Deployment of one container, got %d Deployments", len(m.deployments))
	}
	d := m.deployments[0]
	return d, d.Spec.Template.Spec.Containers[0]
}

func envFrom(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkCommon holds what every rendering keeps: sluice serve, probes on the
// HTTP port, the non-root read-only container, selectors that select the
// pods, and Services whose target ports the container has.
func checkCommon(t *testing.T, m manifest) {
	t.Helper()
	d, c := container(t, m)
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Errorf("args %v do not run sluice serve", c.Args)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port.String() != "http" {
		t.Errorf("liveness probe %+v, want GET /healthz on http", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.String() != "http" {
		t.Errorf("readiness probe %+v, want GET /readyz on http", c.ReadinessProbe)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v, want a read-only root and no privilege escalation", sc)
	}
	if ps := d.Spec.Template.Spec.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not a pod label", k, v)
		}
	}
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if !ports[p.TargetPort.String()] {
				t.Errorf("Service %s targets port %s, which the container does not have", s.Name, p.TargetPort.String())
			}
		}
	}
	// A secret the pod reads is one the chart makes or the values name.
	made := map[string]bool{}
	for _, s := range m.secrets {
		made[s.Name] = true
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && strings.HasPrefix(e.ValueFrom.SecretKeyRef.Name, "r-") && !made[e.ValueFrom.SecretKeyRef.Name] {
			t.Errorf("env %s reads Secret %s, which the chart does not make", e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	// The console stays off the pod's network unless asked.
	if v, ok := flagValue(c.Args, "console-addr"); ok && !strings.HasPrefix(v, "127.0.0.1:") {
		t.Errorf("--console-addr=%s serves the console on the pod's network by default", v)
	}
}

// TestHelmProduction: external Redis and PostgreSQL from Secrets, three
// replicas spread over nodes with a PodDisruptionBudget, the token from a
// Secret, Envoy's face, and the monitoring objects: the ServiceMonitor on
// the metrics Service, every alert of deploy/prometheus/alerts.yml with its
// job selector naming the release, the dashboard as it is in deploy/grafana.
func TestHelmProduction(t *testing.T) {
	m := render(t, filepath.Join(chart, "ci", "production-values.yaml"))
	checkCommon(t, m)
	d, c := container(t, m)
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *d.Spec.Replicas)
	}
	aff := d.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 ||
		aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("no anti-affinity by node: %+v", aff)
	}
	if len(m.pdbs) != 1 || m.pdbs[0].Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudgets %+v, want one with minAvailable 1", m.pdbs)
	}
	for name, secret := range map[string]string{"SLUICE_REDIS": "sluice-redis", "SLUICE_DATABASE": "sluice-database"} {
		e := envFrom(c, name)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != "url" {
			t.Errorf("%s = %+v, want Secret %s key url", name, e, secret)
		}
	}
	for _, want := range []string{"--grpc-addr=:8081", "--envoy-config=/etc/sluice/envoy", "--admin-token-file=/etc/sluice/admin-token/token", "--redis-replica-acks=1"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	var tokenVolume bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		tokenVolume = tokenVolume || v.Secret != nil && v.Secret.SecretName == "sluice-admin-token"
	}
	if !tokenVolume {
		t.Error("the admin token Secret is not mounted")
	}
	if len(m.secrets) != 0 {
		t.Errorf("the chart made Secrets %v with every value in existing ones", m.secrets)
	}
	var envoyConfig bool
	for _, cm := range m.configMaps {
		envoyConfig = envoyConfig || cm.Name == "r-sluice-envoy" && cm.Data["api.yaml"] != ""
	}
	if !envoyConfig {
		t.Error("no Envoy configuration ConfigMap")
	}

	kinds := map[string]map[string]any{}
	for _, o := range m.custom {
		kinds[o["kind"].(string)] = o
	}
	sm := kinds["ServiceMonitor"]
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	selector := dig(sm, "spec", "selector", "matchLabels").(map[string]any)
	var selected []string
	for _, s := range m.services {
		match := true
		for k, v := range selector {
			match = match && s.Labels[k] == v
		}
		if match {
			selected = append(selected, s.Name)
		}
	}
	if !slices.Equal(selected, []string{"r-sluice-metrics"}) {
		t.Errorf("the ServiceMonitor selects %v, want [r-sluice-metrics]", selected)
	}

	pr := kinds["PrometheusRule"]
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	var alerts struct {
		Groups []struct {
			Name  string
			Rules []struct{ Alert, Expr string }
		}
	}
	decodeYAML(t, "prometheus/alerts.yml", "", "", &alerts)
	raw, _ := json.Marshal(pr["spec"])
	var spec struct {
		Groups []struct {
			Name  string
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Groups) != len(alerts.Groups) {
		t.Fatalf("PrometheusRule has %d groups, alerts.yml %d", len(spec.Groups), len(alerts.Groups))
	}
	for i, g := range alerts.Groups {
		if len(spec.Groups[i].Rules) != len(g.Rules) {
			t.Errorf("group %s: %d rules, want %d", g.Name, len(spec.Groups[i].Rules), len(g.Rules))
			continue
		}
		for j, r := range g.Rules {
			got := spec.Groups[i].Rules[j]
			want := strings.ReplaceAll(r.Expr, `job=~"sluice|sluice-metrics"`, `job="r-sluice-metrics"`)
			if got.Alert != r.Alert || got.Expr != want {
				t.Errorf("rule %s: %q, want %q", r.Alert, got.Expr, want)
			}
		}
	}
	var dashboard bool
	for _, cm := range m.configMaps {
		if cm.Name == "r-sluice-dashboard" {
			dashboard = cm.Data["sluice.json"] == string(read(t, "grafana/sluice.json")) && cm.Labels["grafana_dashboard"] == "1"
		}
	}
	if !dashboard {
		t.Error("no dashboard ConfigMap holding deploy/grafana/sluice.json with the sidecar's label")
	}
}

// TestHelmEmbedded: the try-out is one pod on the memory store and a
// SQLite file on an emptyDir, never rolled two at once, with no
// PodDisruptionBudget to block a drain and no store or database variables.
func TestHelmEmbedded(t *testing.T) {
	m := render(t, filepath.Join(chart, "ci", "embedded-values.yaml"))
	checkCommon(t, m)
	d, c := container(t, m)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d, strategy %s; want 1, Recreate", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	if len(m.pdbs) != 0 {
		t.Error("a PodDisruptionBudget for one replica blocks every drain")
	}
	if !slices.Contains(c.Args, "--database=sqlite:///var/lib/sluice/sluice.db") {
		t.Errorf("args %v: no SQLite catalog", c.Args)
	}
	if envFrom(c, "SLUICE_REDIS") != nil || envFrom(c, "SLUICE_DATABASE") != nil {
		t.Error("embedded mode reads SLUICE_REDIS or SLUICE_DATABASE")
	}
	var data bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		data = data || v.Name == "data" && v.EmptyDir != nil
	}
	if !data {
		t.Error("no emptyDir for the SQLite file (the root is read-only)")
	}
	if _, ok := flagValue(c.Args, "admin-token-file"); ok {
		t.Error("an admin token file with no Secret given: the first start should generate the token")
	}
}

// TestHelmInlineValues: URLs and the token given by value go into a Secret
// the chart makes, which the pod reads; extra flags and variables pass.
func TestHelmInlineValues(t *testing.T) {
	m := render(t, filepath.Join(chart, "ci", "inline-values.yaml"))
	checkCommon(t, m)
	_, c := container(t, m)
	if len(m.secrets) != 1 {
		t.Fatalf("Secrets %d, want 1", len(m.secrets))
	}
	s := m.secrets[0]
	for _, key := range []string{"redis-url", "database-url", "admin-token"} {
		if s.StringData[key] == "" {
			t.Errorf("the Secret lacks %s", key)
		}
	}
	if e := envFrom(c, "SLUICE_DATABASE"); e == nil || e.ValueFrom.SecretKeyRef.Name != s.Name || e.ValueFrom.SecretKeyRef.Key != "database-url" {
		t.Errorf("SLUICE_DATABASE = %+v, want the chart's Secret", e)
	}
	for _, want := range []string{"--console=false", "--default-failure-mode=open"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if e := envFrom(c, "SLUICE_LOG_LEVEL"); e == nil || e.Value != "debug" {
		t.Error("extraEnv did not pass")
	}
	for _, a := range c.Args {
		if strings.Contains(a, "secret@postgres") || strings.Contains(a, "an-operator-token") {
			t.Errorf("a secret is in the args, visible in the pod spec: %s", a)
		}
	}
}

// TestHelmRefusesValuesThatCannotRun: without a Redis or a database (and
// not embedded), or with a SQLite URL for several replicas, helm template
// fails with a sentence saying what to set.
func TestHelmRefusesValuesThatCannotRun(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{nil, "set redis.url or redis.existingSecret"},
		{[]string{"redis.url=redis://r:6379"}, "set database.url or database.existingSecret"},
		{[]string{"redis.url=redis://r:6379", "database.url=sqlite:///x.db"}, "database.url must be a postgres://"},
		{[]string{"embedded=true", "replicaCount=0"}, "replicaCount must be at least 1"},
	} {
		args := []string{"template", "r", chart}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template --set %v: err %v, want an error saying %q:\n%s", c.set, err, c.want, out)
		}
	}
}

// TestHelmYAML: the chart's own files (not the templates) are YAML that
// the Kubernetes decoder reads, and values.yaml names every key the
// templates use at the top level.
func TestHelmYAML(t *testing.T) {
	var values map[string]any
	if err := k8syaml.Unmarshal(read(t, filepath.Join(chart, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	templates, err := filepath.Glob(filepath.Join(chart, "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range templates {
		for _, part := range strings.Split(string(read(t, path)), ".Values.")[1:] {
			key := part[:strings.IndexAny(part, " .})|\n")]
			if _, ok := values[key]; !ok {
				t.Errorf("%s uses .Values.%s, which values.yaml does not document", path, key)
			}
		}
	}
}
