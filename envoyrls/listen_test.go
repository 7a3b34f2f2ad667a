package envoyrls_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
)

// grpcServerTLS is the server option of TLS with a certificate of ca that
// requires a client certificate of ca too.
func grpcServerTLS(t *testing.T, ca *tlstest.CA) grpc.ServerOption {
	t.Helper()
	return grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLSCertificate(t)},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}))
}

// socketDir is a temporary directory short enough for a unix socket path
// (at most 108 bytes), which t.TempDir's long names may exceed.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rls-uds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestListen(t *testing.T) {
	uds := filepath.Join(socketDir(t), "rls.sock")
	lns, err := envoyrls.Listen(context.Background(), "127.0.0.1:0", uds)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	if len(lns) != 2 || lns[0].Addr().Network() != "tcp" || lns[1].Addr().Network() != "unix" {
		t.Fatalf("listeners %v, want TCP then the unix socket", lns)
	}
	if lns, err := envoyrls.Listen(context.Background(), "", ""); err != nil || len(lns) != 0 {
		t.Fatalf("neither address: %v, %v; want no listener", lns, err)
	}
	// The socket is in use: a second Listen must neither take it over nor
	// keep the TCP listener it opened first.
	if _, err := envoyrls.Listen(context.Background(), "127.0.0.1:0", uds); err == nil || !strings.Contains(err.Error(), "is in use") {
		t.Fatalf("error %v, want the live socket refused", err)
	}
}

func TestRemoveStaleSocket(t *testing.T) {
	dir := socketDir(t)
	if err := envoyrls.RemoveStaleSocket(filepath.Join(dir, "absent.sock")); err != nil {
		t.Fatalf("no file: %v", err)
	}
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := envoyrls.RemoveStaleSocket(file); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("error %v, want the regular file refused", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("the regular file was touched")
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if err := envoyrls.RemoveStaleSocket(stale); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale socket is still there: %v", err)
	}
}

func TestGRPCServerOptions(t *testing.T) {
	base := len(envoyrls.ServerOptions())
	extra := grpc.MaxSendMsgSize(1 << 20)
	for name, c := range map[string]struct {
		opts envoyrls.GRPCOptions
		want int
	}{
		"defaults":       {envoyrls.GRPCOptions{}, base},
		"connection_age": {envoyrls.GRPCOptions{MaxConnAgeGrace: 1}, base + 1},
		"extra_last":     {envoyrls.GRPCOptions{Extra: []grpc.ServerOption{extra}}, base + 1},
	} {
		if got := envoyrls.GRPCServerOptions(c.opts); len(got) != c.want {
			t.Errorf("%s: %d options, want %d", name, len(got), c.want)
		}
	}
}

func TestServeDebug(t *testing.T) {
	srv, _ := memoryServer(t, configDir(t, liveConfig(5)), envoyrls.Options{})
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	debug, err := srv.ServeDebug(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer debug.Close()
	resp, err := http.Get("http://" + addr + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != srv.Config().Dump() {
		t.Fatalf("/rlconfig: %d %q, want the dump %q", resp.StatusCode, body, srv.Config().Dump())
	}
	_, err = srv.ServeDebug(context.Background(), "127.0.0.1:-1", nil)
	if err == nil || !strings.Contains(err.Error(), "--debug-addr") {
		t.Fatalf("a bad address: %v, want an error naming --debug-addr", err)
	}
}
