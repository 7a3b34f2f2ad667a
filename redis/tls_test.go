package redis_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// TestTLSWithAPrivateCAAndClientCertificates runs the store against a real
// redis-server's TLS listener, as Envoy Gateway configures envoyproxy/ratelimit:
// a server certificate from a private CA, client certificates required. The
// store checks over it with the CA and a client certificate; without the
// certificate, or with another CA, it cannot connect; a server certificate
// that does not name the address dialled connects only with
// SkipHostnameVerification, which still verifies the chain.
func TestTLSWithAPrivateCAAndClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "redis-ca")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	other := tlstest.NewCA(t, "other-ca")
	otherFile := filepath.Join(dir, "other.pem")
	tlstest.WriteFile(t, otherFile, other.PEM)
	clientCert, clientKey := ca.Client(t, "sluice").Write(t, dir, "client")

	start := func(server tlstest.Pair, name string) *testenv.RedisServer {
		cert, key := server.Write(t, dir, name)
		return testenv.RedisTLS(t, testenv.RedisTLSFiles{Cert: cert, Key: key, CA: caFile, AuthClients: true})
	}
	byIP := start(ca.Server(t), "server-ip")
	byName := start(ca.ServerNamed(t, "redis.internal"), "server-name")

	open := func(addr string, f tlsconfig.ClientFiles) error {
		t.Helper()
		cfg, err := tlsconfig.ClientConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sluiceredis.Open("redis://"+addr+"/0", sluiceredis.Options{TLS: cfg})
		if err != nil {
			return err
		}
		defer s.Close()
		d, err := s.Check(context.Background(), connectReq)
		if err == nil && !d.Allowed {
			t.Fatalf("first check over TLS denied: %+v", d)
		}
		return err
	}
	mutual := tlsconfig.ClientFiles{CA: caFile, Cert: clientCert, Key: clientKey}
	if err := open(byIP.TLSAddr, mutual); err != nil {
		t.Fatalf("check over TLS with the CA and a client certificate: %v", err)
	}
	if err := open(byIP.TLSAddr, tlsconfig.ClientFiles{CA: caFile}); err == nil {
		t.Error("connected without a client certificate to a server that requires one")
	}
	if err := open(byIP.TLSAddr, tlsconfig.ClientFiles{CA: otherFile, Cert: clientCert, Key: clientKey}); err == nil {
		t.Error("connected to a server whose certificate is from another CA")
	}
	if err := open(byName.TLSAddr, mutual); err == nil {
		t.Error("connected to 127.0.0.1 with a certificate for redis.internal alone, with hostname verification on")
	}
	skip := mutual
	skip.SkipHostnameVerification = true
	if err := open(byName.TLSAddr, skip); err != nil {
		t.Fatalf("with SkipHostnameVerification: %v", err)
	}
	skip.CA = otherFile
	if err := open(byName.TLSAddr, skip); err == nil {
		t.Error("SkipHostnameVerification accepted a certificate from another CA: the chain must still be verified")
	}
	named := mutual
	named.ServerName = "redis.internal"
	if err := open(byName.TLSAddr, named); err != nil {
		t.Fatalf("with ServerName redis.internal: %v", err)
	}
}
