package envoyrls_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
	"github.com/sluicelabs/sluice/internal/xdstest"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// followServer is a server with no configuration yet, counting its loads in
// reg and logging to logs.
func followServer(t *testing.T, logs *testenv.Buffer) (*envoyrls.Server, *prometheus.Registry) {
	t.Helper()
	store := memory.New(memory.Options{})
	engine := check.New(store, check.Options{})
	t.Cleanup(func() { engine.Close(); store.Close() })
	reg := prometheus.NewRegistry()
	return envoyrls.NewServer(envoyrls.Options{Engine: engine, Metrics: metrics.New(reg), Logger: slog.New(slog.NewTextHandler(logs, nil))}), reg
}

// loads is sluice_envoy_config_loads_total{result}.
func loads(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "sluice_envoy_config_loads_total" && m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestFollowDirectory(t *testing.T) {
	t.Run("loads_counts_and_follows", func(t *testing.T) {
		var logs testenv.Buffer
		srv, reg := followServer(t, &logs)
		dir := configDir(t, liveConfig(5))
		stop, err := srv.Follow(envoyrls.Source{Dir: dir, Interval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if got := limitOf(srv); got != 5 || loads(t, reg, "success") != 1 {
			t.Fatalf("limit %d, %v loads; want the directory in force, counted once", got, loads(t, reg, "success"))
		}
		write(t, dir, "domaina.yaml", liveConfig(7))
		deadline := time.Now().Add(10 * time.Second) // generous: not what is tested
		for limitOf(srv) != 7 {
			if time.Now().After(deadline) {
				t.Fatal("the changed file was not followed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("first_load_must_succeed", func(t *testing.T) {
		srv, reg := followServer(t, &testenv.Buffer{})
		_, err := srv.Follow(envoyrls.Source{Dir: configDir(t, "domain: [")})
		if err == nil || !strings.Contains(err.Error(), "--envoy-config") || loads(t, reg, "failure") != 1 {
			t.Fatalf("error %v, %v failed loads; want the broken file refused and counted", err, loads(t, reg, "failure"))
		}
	})
	t.Run("warns_of_an_empty_directory", func(t *testing.T) {
		var logs testenv.Buffer
		srv, _ := followServer(t, &logs)
		stop, err := srv.Follow(envoyrls.Source{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "holds no configuration file") {
			t.Fatalf("no warning of the empty directory in:\n%s", logs.String())
		}
	})
}

func TestFollowXDSOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "xds-ca")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	mgmt := xdstest.Start(t, grpcServerTLS(t, ca))
	clientCert, clientKey := ca.Client(t, "sluice").Write(t, dir, "client")
	mgmt.Set(t, "rls", "1", &rlconfv3.RateLimitConfig{Name: "live", Domain: "live", Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 3},
	}}})
	srv, reg := followServer(t, &testenv.Buffer{})
	stop, err := srv.Follow(envoyrls.Source{XDSServer: mgmt.Addr, XDS: envoyrls.XDSOptions{NodeID: "rls", RetryInterval: 50 * time.Millisecond},
		XDSTLS: &envoyrls.XDSTLS{CA: caFile, Cert: clientCert, Key: clientKey, ServerName: "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	deadline := time.Now().Add(15 * time.Second) // generous: not what is tested
	for loads(t, reg, "success") != 1 || limitOf(srv) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("no configuration from the xDS server over mutual TLS within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestXDSTLS(t *testing.T) {
	if err := (envoyrls.XDSTLS{Cert: "/c.pem"}).Validate(); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("a certificate without its key: %v", err)
	}
	if err := (envoyrls.XDSTLS{CA: "/ca.pem", Cert: "/c.pem", Key: "/k.pem"}).Validate(); err != nil {
		t.Errorf("a complete set: %v", err)
	}
	if _, err := (&envoyrls.XDSTLS{CA: filepath.Join(t.TempDir(), "missing.pem")}).Credentials(); err == nil || !strings.Contains(err.Error(), "--envoy-xds-tls-ca") {
		t.Errorf("a missing CA file: %v, want an error naming --envoy-xds-tls-ca", err)
	}
	if _, err := (&envoyrls.XDSTLS{Cert: "/missing.pem", Key: "/missing.key"}).Credentials(); err == nil || !strings.Contains(err.Error(), "--envoy-xds-tls-cert") {
		t.Errorf("a missing client certificate: %v", err)
	}
	var off *envoyrls.XDSTLS
	if c, err := off.Credentials(); err != nil || c.Info().SecurityProtocol != "insecure" {
		t.Errorf("no TLS: %v, %v; want plaintext", c, err)
	}
	for tls, want := range map[*envoyrls.XDSTLS]string{nil: "off", {CA: "/ca.pem"}: "on", {Cert: "/c", Key: "/k"}: "mutual"} {
		if got := tls.Mode(); got != want {
			t.Errorf("%+v: mode %q, want %q", tls, got, want)
		}
	}
}
