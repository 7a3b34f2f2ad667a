package gateway_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
	"github.com/sluicelabs/sluice/metrics"
)

// tlsFiles writes a CA's certificate, a server certificate and its key, and
// returns the CA, a client certificate it signed and the three paths.
func tlsFiles(t *testing.T) (ca *tlstest.CA, client tls.Certificate, certFile, keyFile, caFile string) {
	t.Helper()
	dir := t.TempDir()
	ca = tlstest.NewCA(t, "gateway-ca")
	certFile, keyFile = ca.Server(t).Write(t, dir, "server")
	caFile = filepath.Join(dir, "clients.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	return ca, ca.Client(t, "client").TLSCertificate(t), certFile, keyFile, caFile
}

func TestConfigTLSErrorsNameTheField(t *testing.T) {
	_, _, certFile, keyFile, caFile := tlsFiles(t)
	_, _, _, otherKey, _ := tlsFiles(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	const route = "routes: [{name: api, path_prefix: /api, upstream: 'http://127.0.0.1:9'}]\n"
	for _, tt := range []struct {
		name, tls, want string
	}{
		{"no_cert", fmt.Sprintf("{key_file: %s}", keyFile), "tls.cert_file: the server certificate (PEM) is required"},
		{"no_key", fmt.Sprintf("{cert_file: %s}", certFile), "tls.key_file: the certificate's private key (PEM) is required"},
		{"unreadable_cert", fmt.Sprintf("{cert_file: %s, key_file: %s}", missing, keyFile), "tls.cert_file: the certificate file cannot be read"},
		{"unreadable_key", fmt.Sprintf("{cert_file: %s, key_file: %s}", certFile, missing), "tls.key_file: the key file cannot be read"},
		{"key_of_another_cert", fmt.Sprintf("{cert_file: %s, key_file: %s}", certFile, otherKey), "tls.key_file: the key in " + otherKey + " does not match"},
		{"cert_is_a_key", fmt.Sprintf("{cert_file: %s, key_file: %s}", keyFile, keyFile), "tls.cert_file: " + keyFile + ": the file holds no PEM certificate"},
		{"unreadable_client_ca", fmt.Sprintf("{cert_file: %s, key_file: %s, client_ca_file: %s}", certFile, keyFile, missing), "tls.client_ca_file: the client CA file cannot be read"},
		{"client_ca_is_a_key", fmt.Sprintf("{cert_file: %s, key_file: %s, client_ca_file: %s}", certFile, keyFile, keyFile), "tls.client_ca_file: " + keyFile + " holds no PEM certificate"},
		{"unknown_field", fmt.Sprintf("{cert_file: %s, key_file: %s, ca_file: %s}", certFile, keyFile, caFile), "field ca_file not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte("tls: " + tt.tls + "\n" + route))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestGatewayServesMutualTLS: with a tls section, NewServer's server
// answers over TLS 1.2 or later, and with client_ca_file only clients with
// a certificate of that CA.
func TestGatewayServesMutualTLS(t *testing.T) {
	ca, client, certFile, keyFile, caFile := tlsFiles(t)
	up := newUpstream(t, "app")
	cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("tls: {cert_file: %s, key_file: %s, client_ca_file: %s}\nroutes: [{name: api, path_prefix: /api, upstream: %q}]\n",
		certFile, keyFile, caFile, up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(cfg, gateway.Options{Store: storeOf(t, cfg), Metrics: metrics.New(reg), Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.NewServer(cfg, gw, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if srv.TLSConfig == nil {
		t.Fatal("NewServer gave no TLS configuration")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() {
		srv.Close()
		gw.Close()
	})

	get := func(c *tls.Config, path string) (int, string, error) {
		tr := &http.Transport{TLSClientConfig: c, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("https://" + ln.Addr().String() + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	withCert := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client}}
	// The upstream is told the client came over https.
	if code, body, err := get(withCert, "/api/x"); err != nil || code != 200 || !strings.Contains(body, `"upstream":"app"`) ||
		!strings.Contains(body, `"x_forwarded_proto":"https"`) {
		t.Fatalf("with a client certificate: %d %s %v", code, body, err)
	}
	if _, _, err := get(&tls.Config{RootCAs: ca.Pool()}, "/healthz"); err == nil {
		t.Error("a client without a certificate was answered")
	}
	old := withCert.Clone()
	old.MaxVersion = tls.VersionTLS11
	old.MinVersion = tls.VersionTLS10
	if _, _, err := get(old, "/healthz"); err == nil {
		t.Error("a TLS 1.1 client was answered")
	}
}

// TestReloadRefusesANewTLSSection: the listener is set up once; the files'
// contents are reread on their own, so a reload naming other files (or
// turning TLS on or off) is refused.
func TestReloadRefusesANewTLSSection(t *testing.T) {
	_, _, certFile, keyFile, caFile := tlsFiles(t)
	up := newUpstream(t, "app")
	route := fmt.Sprintf("routes: [{name: api, path_prefix: /api, upstream: %q}]\n", up.URL)
	withTLS := fmt.Sprintf("tls: {cert_file: %s, key_file: %s}\n", certFile, keyFile)
	gw, _ := startGateway(t, withTLS+route)
	for _, changed := range []string{"", fmt.Sprintf("tls: {cert_file: %s, key_file: %s, client_ca_file: %s}\n", certFile, keyFile, caFile)} {
		cfg, err := gateway.ParseConfig([]byte(changed + route))
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.Reload(cfg); err == nil || !strings.HasPrefix(err.Error(), "tls:") {
			t.Fatalf("reload with tls %q: err = %v, want a refusal naming tls", changed, err)
		}
	}
	same, err := gateway.ParseConfig([]byte(withTLS + route))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Reload(same); err != nil {
		t.Fatalf("reload with the same tls section: %v", err)
	}
}
