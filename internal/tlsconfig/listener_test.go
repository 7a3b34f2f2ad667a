package tlsconfig_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
)

var flagNames = tlsconfig.Names{Cert: "--tls-cert", Key: "--tls-key", ClientCA: "--tls-client-ca"}

func TestFilesCheck(t *testing.T) {
	for name, c := range map[string]struct {
		files tlsconfig.Files
		want  string
	}{
		"none":                   {tlsconfig.Files{}, ""},
		"complete":               {tlsconfig.Files{Cert: "c", Key: "k", ClientCA: "ca"}, ""},
		"cert_without_key":       {tlsconfig.Files{Cert: "c"}, "--tls-cert is set but --tls-key is not"},
		"key_without_cert":       {tlsconfig.Files{Key: "k"}, "--tls-key is set but --tls-cert is not"},
		"client_ca_without_cert": {tlsconfig.Files{ClientCA: "ca"}, "--tls-client-ca verifies client certificates, which needs TLS"},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.files.Check(flagNames)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestLoadNamesTheFileAtFault(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	_, otherKey := tlstest.NewCA(t, "other").Server(t).Write(t, t.TempDir(), "other")
	missing := filepath.Join(dir, "missing.pem")

	if r, err := tlsconfig.Load(tlsconfig.Files{}, flagNames, tlsconfig.Options{}); r != nil || err != nil {
		t.Fatalf("no certificate: %v, %v; want TLS off (nil, nil)", r, err)
	}
	if tlsconfig.Mode(nil) != "off" || tlsconfig.HTTPConfig(nil) != nil {
		t.Fatal("a nil Reloader must read as TLS off")
	}
	for name, c := range map[string]struct {
		files tlsconfig.Files
		want  string
	}{
		"unreadable_cert":      {tlsconfig.Files{Cert: missing, Key: key}, "--tls-cert: "},
		"key_of_another_cert":  {tlsconfig.Files{Cert: cert, Key: otherKey}, "--tls-key: "},
		"unreadable_client_ca": {tlsconfig.Files{Cert: cert, Key: key, ClientCA: missing}, "--tls-client-ca: "},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := tlsconfig.Load(c.files, flagNames, tlsconfig.Options{}); err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want one starting %q", err, c.want)
			}
		})
	}
	on, err := tlsconfig.Load(tlsconfig.Files{Cert: cert, Key: key}, flagNames, tlsconfig.Options{})
	if err != nil || tlsconfig.Mode(on) != "on" {
		t.Fatalf("server TLS: %v, mode %q", err, tlsconfig.Mode(on))
	}
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	mutual, err := tlsconfig.Load(tlsconfig.Files{Cert: cert, Key: key, ClientCA: caFile}, flagNames, tlsconfig.Options{})
	if err != nil || tlsconfig.Mode(mutual) != "mutual" {
		t.Fatalf("mutual TLS: %v, mode %q", err, tlsconfig.Mode(mutual))
	}
}

// serveWith serves "ok" with ServeHTTP: over TLS when c is set.
func serveWith(t *testing.T, c *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }), TLSConfig: c}
	go func() { _ = tlsconfig.ServeHTTP(srv, ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestServeHTTPServesTLSOnlyWhenConfigured(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	if resp, err := http.Get("http://" + serveWith(t, nil)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("plain HTTP: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
	r := newReloader(t, tlsconfig.Files{Cert: cert, Key: key}, io.Discard)
	st, err := get("https://"+serveWith(t, tlsconfig.HTTPConfig(r)), &tls.Config{RootCAs: ca.Pool()})
	if err != nil || st.NegotiatedProtocol != "h2" {
		t.Fatalf("HTTPS: %v, %+v; want h2 over TLS", err, st)
	}
}

func TestRequireClientSAN(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	caFile := filepath.Join(dir, "clients.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	r := newReloader(t, tlsconfig.Files{Cert: cert, Key: key, ClientCA: caFile}, io.Discard)
	url := "https://" + serveWith(t, tlsconfig.RequireClientSAN(tlsconfig.HTTPConfig(r), "envoy.internal"))
	client := func(p tlstest.Pair) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{p.TLSCertificate(t)}}
	}
	if _, err := get(url, client(ca.Client(t, "envoy", "envoy.internal"))); err != nil {
		t.Fatalf("a client certificate for the name was refused: %v", err)
	}
	if _, err := get(url, client(ca.Client(t, "other", "other.internal"))); err == nil {
		t.Fatal("a client certificate of the right CA but another name was accepted")
	}
}
