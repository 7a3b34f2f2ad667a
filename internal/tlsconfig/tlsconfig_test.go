package tlsconfig_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
)

// checkEvery is the reload interval of the tests: short, so a rotation is
// seen after a brief sleep.
const checkEvery = 5 * time.Millisecond

// serveHTTPS serves "ok" over TLS with r's configuration, as sluice serve
// does, and returns the base URL.
func serveHTTPS(t *testing.T, r *tlsconfig.Reloader) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		TLSConfig: r.ServerConfig("h2", "http/1.1"),
		// Refused handshakes are what some tests are after.
		ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn),
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	return "https://" + ln.Addr().String()
}

// get fetches url on a new connection with client configuration c and
// returns the connection state.
func get(url string, c *tls.Config) (*tls.ConnectionState, error) {
	tr := &http.Transport{TLSClientConfig: c, DisableKeepAlives: true, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if string(body) != "ok" {
		return nil, errors.New("unexpected body " + string(body))
	}
	return resp.TLS, nil
}

func newReloader(t *testing.T, files tlsconfig.Files, log io.Writer) *tlsconfig.Reloader {
	t.Helper()
	r, err := tlsconfig.New(files, tlsconfig.Options{
		Logger:        slog.New(slog.NewJSONHandler(log, nil)),
		CheckInterval: checkEvery,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHTTPSAnswersTLS12AndAboveOnly(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	url := serveHTTPS(t, newReloader(t, tlsconfig.Files{Cert: certFile, Key: keyFile}, io.Discard))

	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		st, err := get(url, &tls.Config{RootCAs: ca.Pool(), MinVersion: v, MaxVersion: v})
		if err != nil {
			t.Fatalf("%s: %v", tls.VersionName(v), err)
		}
		if st.Version != v {
			t.Errorf("negotiated %s, want %s", tls.VersionName(st.Version), tls.VersionName(v))
		}
	}
	if st, err := get(url, &tls.Config{RootCAs: ca.Pool()}); err != nil {
		t.Errorf("default client: %v", err)
	} else if st.NegotiatedProtocol != "h2" {
		t.Errorf("default client: protocol %q, want h2", st.NegotiatedProtocol)
	}
	if _, err := get(url, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 client was answered")
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	caFile := filepath.Join(dir, "clients.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	url := serveHTTPS(t, newReloader(t, tlsconfig.Files{Cert: certFile, Key: keyFile, ClientCA: caFile}, io.Discard))

	client := func(p *tlstest.Pair) *tls.Config {
		c := &tls.Config{RootCAs: ca.Pool()}
		if p != nil {
			c.Certificates = []tls.Certificate{p.TLSCertificate(t)}
		}
		return c
	}
	good, stranger := ca.Client(t, "envoy"), other.Client(t, "envoy")
	if _, err := get(url, client(nil)); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if _, err := get(url, client(&stranger)); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if _, err := get(url, client(&good)); err != nil {
		t.Errorf("a client certificate of the CA was refused: %v", err)
	}

	// The CA file is reloaded too: once it names the other CA, the other
	// CA's clients get in and the first CA's do not.
	tlstest.WriteFile(t, caFile, other.PEM)
	testenv.Eventually(t, 10*time.Second, "the new CA's client is accepted once the CA file changed", func() bool {
		_, err := get(url, client(&stranger))
		return err == nil
	})
	if _, err := get(url, client(&good)); err == nil {
		t.Error("after the CA file changed, the removed CA's client was still accepted")
	}
}

func TestCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	first, second := ca.Server(t), ca.Server(t)
	certFile, keyFile := first.Write(t, dir, "server")
	var log testenv.Buffer
	url := serveHTTPS(t, newReloader(t, tlsconfig.Files{Cert: certFile, Key: keyFile}, &log))
	served := func() string {
		t.Helper()
		st, err := get(url, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].SerialNumber.String()
	}
	if got := served(); got != first.Serial.String() {
		t.Fatalf("serves serial %s, want the first certificate's %s", got, first.Serial)
	}

	second.Write(t, dir, "server")
	testenv.Eventually(t, 10*time.Second, "the rotated certificate is served", func() bool { return served() == second.Serial.String() })
	if !strings.Contains(log.String(), "TLS certificate reloaded") {
		t.Errorf("the reload was not logged:\n%s", log.String())
	}

	// A broken certificate keeps the last good one, and is logged once
	// however many handshakes follow.
	tlstest.WriteFile(t, certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"))
	// Files are looked at on handshakes: each probe is one.
	testenv.Eventually(t, 10*time.Second, "the broken file is logged", func() bool {
		if got := served(); got != second.Serial.String() {
			t.Fatalf("with a broken file serves serial %s, want the last good %s", got, second.Serial)
		}
		return strings.Contains(log.String(), "cannot be used")
	})
	// Then several more checks of the file pass: still the last good
	// certificate, and no second log line.
	for range 3 {
		time.Sleep(2 * checkEvery)
		if got := served(); got != second.Serial.String() {
			t.Fatalf("with a broken file serves serial %s, want the last good %s", got, second.Serial)
		}
	}
	if n := strings.Count(log.String(), "cannot be used"); n != 1 {
		t.Errorf("the broken file was logged %d times, want once:\n%s", n, log.String())
	}

	// A certificate whose key is not yet in place (a rotation half done)
	// is not taken either; it is once the key follows.
	third := ca.Server(t)
	tlstest.WriteFile(t, certFile, third.Cert)
	time.Sleep(2 * checkEvery)
	if got := served(); got != second.Serial.String() {
		t.Fatalf("with a mismatched key serves serial %s, want %s", got, second.Serial)
	}
	tlstest.WriteFile(t, keyFile, third.Key)
	testenv.Eventually(t, 10*time.Second, "the certificate is served once its key followed", func() bool { return served() == third.Serial.String() })
}

func TestNewRefusesBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	_, otherKey := ca.Server(t).Write(t, dir, "other")
	garbage := filepath.Join(dir, "garbage.pem")
	tlstest.WriteFile(t, garbage, []byte("not PEM"))
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name  string
		files tlsconfig.Files
		role  tlsconfig.Role
		want  string
	}{
		{"no_key", tlsconfig.Files{Cert: certFile}, tlsconfig.RoleKey, "needs its key"},
		{"no_cert", tlsconfig.Files{Key: keyFile}, tlsconfig.RoleCert, "required"},
		{"unreadable_cert", tlsconfig.Files{Cert: missing, Key: keyFile}, tlsconfig.RoleCert, "cannot be read"},
		{"unreadable_key", tlsconfig.Files{Cert: certFile, Key: missing}, tlsconfig.RoleKey, "cannot be read"},
		{"cert_not_pem", tlsconfig.Files{Cert: garbage, Key: keyFile}, tlsconfig.RoleCert, "no PEM certificate"},
		{"key_not_pem", tlsconfig.Files{Cert: certFile, Key: garbage}, tlsconfig.RoleKey, "no usable PEM private key"},
		{"key_of_another_cert", tlsconfig.Files{Cert: certFile, Key: otherKey}, tlsconfig.RoleKey, "does not match the certificate"},
		{"unreadable_ca", tlsconfig.Files{Cert: certFile, Key: keyFile, ClientCA: missing}, tlsconfig.RoleClientCA, "cannot be read"},
		{"ca_not_pem", tlsconfig.Files{Cert: certFile, Key: keyFile, ClientCA: garbage}, tlsconfig.RoleClientCA, "no PEM certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tlsconfig.New(c.files, tlsconfig.Options{})
			var fe *tlsconfig.FileError
			if !errors.As(err, &fe) || fe.Role != c.role || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a %s FileError containing %q", err, c.role, c.want)
			}
		})
	}
}

// TestServerConfigWithoutClientCA: no client certificate is asked for.
func TestServerConfigWithoutClientCA(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	r := newReloader(t, tlsconfig.Files{Cert: certFile, Key: keyFile}, io.Discard)
	c := r.ServerConfig()
	if c.ClientAuth != tls.NoClientCert || c.GetConfigForClient != nil || r.MutualTLS() {
		t.Errorf("client auth %v without a client CA", c.ClientAuth)
	}
	if c.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %x", c.MinVersion)
	}
}
