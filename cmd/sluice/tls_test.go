package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
)

// tlsFixture is a CA with a server certificate and a client certificate on
// disk.
type tlsFixture struct {
	ca                *tlstest.CA
	cert, key, caFile string
	client            tls.Certificate
}

func newTLSFixture(t *testing.T, name string) tlsFixture {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, name)
	cert, key := ca.Server(t).Write(t, dir, "server")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	return tlsFixture{ca: ca, cert: cert, key: key, caFile: caFile, client: ca.Client(t, "client").TLSCertificate(t)}
}

// clientConfig trusts f's CA and presents f's client certificate, unless
// anonymous.
func (f tlsFixture) clientConfig(anonymous bool) *tls.Config {
	c := &tls.Config{RootCAs: f.ca.Pool()}
	if !anonymous {
		c.Certificates = []tls.Certificate{f.client}
	}
	return c
}

// httpsGet fetches url over a new connection and returns the status.
func httpsGet(url string, c *tls.Config) (int, error) {
	tr := &http.Transport{TLSClientConfig: c, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestServeRejectsBadTLSConfiguration(t *testing.T) {
	f := newTLSFixture(t, "ca")
	other := newTLSFixture(t, "other")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	base := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "x.db"),
		StoreTimeout: 50 * time.Millisecond, DefaultFailureMode: "closed", LogLevel: "info"}
	for _, c := range []struct {
		name    string
		change  func(*serveConfig)
		wantErr string
	}{
		{"cert_without_key", func(c *serveConfig) { c.TLSCert = f.cert }, "--tls-cert is set but --tls-key is not"},
		{"key_without_cert", func(c *serveConfig) { c.TLSKey = f.key }, "--tls-key is set but --tls-cert is not"},
		{"client_ca_without_cert", func(c *serveConfig) { c.TLSClientCA = f.caFile }, "--tls-client-ca verifies client certificates, which needs TLS"},
		{"unreadable_cert", func(c *serveConfig) { c.TLSCert, c.TLSKey = missing, f.key }, "--tls-cert: the certificate file cannot be read"},
		{"key_of_another_cert", func(c *serveConfig) { c.TLSCert, c.TLSKey = f.cert, other.key }, "--tls-key: the key in " + other.key + " does not match the certificate in " + f.cert},
		{"unreadable_client_ca", func(c *serveConfig) { c.TLSCert, c.TLSKey, c.TLSClientCA = f.cert, f.key, missing }, "--tls-client-ca: the client CA file cannot be read"},
		{"client_ca_not_pem", func(c *serveConfig) { c.TLSCert, c.TLSKey, c.TLSClientCA = f.cert, f.key, f.key }, "--tls-client-ca: " + f.key + " holds no PEM certificate"},
		{"grpc_cert_without_key", func(c *serveConfig) { c.GRPCAddr, c.GRPCTLSCert = "127.0.0.1:0", f.cert }, "--grpc-tls-cert is set but --grpc-tls-key is not"},
		{"grpc_tls_without_grpc", func(c *serveConfig) { c.GRPCTLSCert, c.GRPCTLSKey = f.cert, f.key }, "--grpc-tls-cert is set but neither --grpc-addr nor --grpc-uds is"},
		{"grpc_client_ca_without_cert", func(c *serveConfig) { c.GRPCAddr, c.GRPCTLSClientCA = "127.0.0.1:0", f.caFile }, "--grpc-tls-client-ca verifies client certificates"},
		{"grpc_key_of_another_cert", func(c *serveConfig) { c.GRPCAddr, c.GRPCTLSCert, c.GRPCTLSKey = "127.0.0.1:0", f.cert, other.key }, "--grpc-tls-key: the key in"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.change(&cfg)
			svc, err := startService(context.Background(), cfg, &testenv.Buffer{})
			if err == nil {
				t.Fatalf("started (on %s)", svc.Addr)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %q, want one containing %q", err, c.wantErr)
			}
		})
	}
}

// TestServeOverTLS: --tls-* put --addr, --metrics-addr and --envoy-json-addr
// behind mutual TLS; --grpc-tls-* put --grpc-addr behind TLS of its own (here
// another CA, mutual too), and ShouldRateLimit answers over it.
func TestServeOverTLS(t *testing.T) {
	h, g := newTLSFixture(t, "http-ca"), newTLSFixture(t, "grpc-ca")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	jsonAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
		AdminToken: "tls-test-admin-token-0123456789abcdef", StoreTimeout: 50 * time.Millisecond,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info",
		MetricsAddr: metricsAddr, EnvoyJSONAddr: jsonAddr, GRPCAddr: grpcAddr, EnvoyConfig: envoyTestDir(t, envoyTestConfig),
		TLSCert: h.cert, TLSKey: h.key, TLSClientCA: h.caFile,
		GRPCTLSCert: g.cert, GRPCTLSKey: g.key, GRPCTLSClientCA: g.caFile}
	ctx, cancel := context.WithCancel(context.Background())
	var output testenv.Buffer
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-svc.done; err != nil {
			t.Error(err)
		}
	}()

	for _, url := range []string{"https://" + svc.Addr + "/healthz", "https://" + metricsAddr + "/metrics", "https://" + jsonAddr + "/healthcheck"} {
		if code, err := httpsGet(url, h.clientConfig(false)); err != nil || code != http.StatusOK {
			t.Errorf("GET %s with a client certificate: %d, %v; want 200", url, code, err)
		}
		if _, err := httpsGet(url, h.clientConfig(true)); err == nil {
			t.Errorf("GET %s without a client certificate was answered", url)
		}
		if _, err := httpsGet(url, g.clientConfig(false)); err == nil {
			t.Errorf("GET %s with the gRPC CA's client certificate was answered", url)
		}
	}
	if resp, err := http.Get("http://" + svc.Addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP is answered on the TLS listener")
		}
	}
	if !strings.Contains(output.String(), `"tls":"mutual"`) {
		t.Errorf("the listeners' TLS is not logged:\n%s", output.String())
	}

	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	call := func(creds credentials.TransportCredentials) (*rlspb.RateLimitResponse, error) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	}
	resp, err := call(credentials.NewTLS(g.clientConfig(false)))
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over TLS: %v, %v", resp, err)
	}
	if _, err := call(credentials.NewTLS(g.clientConfig(true))); err == nil {
		t.Error("a gRPC client without a certificate was answered")
	}
	if _, err := call(insecure.NewCredentials()); err == nil {
		t.Error("a plaintext gRPC client was answered")
	}
}

// TestGatewayCommandServesTLS: a tls section puts `sluice gateway`'s
// listener behind (here mutual) TLS.
func TestGatewayCommandServesTLS(t *testing.T) {
	f := newTLSFixture(t, "gateway-ca")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	config := fmt.Sprintf("listen: %q\nadmin_listen: 127.0.0.1:%d\ntls: {cert_file: %s, key_file: %s, client_ca_file: %s}\nroutes: [{name: api, path_prefix: /api, upstream: 'http://127.0.0.1:9'}]\n",
		addr, testenv.FreePort(t), f.cert, f.key, f.caFile)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, gatewayFlags{Config: path, ShutdownTimeout: 5 * time.Second},
			slog.New(slog.NewJSONHandler(&logs, nil)), nil, nil)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runGateway: %v", err)
		}
	}()
	testenv.Eventually(t, 10*time.Second, "the gateway logs that it listens", func() bool {
		return strings.Contains(logs.String(), "gateway listening")
	})
	// No route has /nowhere: the gateway's own 404 says TLS got through.
	if code, err := httpsGet("https://"+addr+"/nowhere", f.clientConfig(false)); err != nil || code != http.StatusNotFound {
		t.Fatalf("GET /nowhere with a client certificate: %d, %v; want the gateway's 404", code, err)
	}
	if _, err := httpsGet("https://"+addr+"/nowhere", f.clientConfig(true)); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if !strings.Contains(logs.String(), `"tls":"mutual"`) {
		t.Errorf("the listener's TLS is not logged:\n%s", logs.String())
	}
}
