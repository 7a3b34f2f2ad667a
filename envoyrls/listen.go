package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// Listen opens the gRPC listeners of the rate limit service: TCP on addr
// (--grpc-addr), a unix socket at uds (--grpc-uds), or both; "" is none.
// A socket a killed process left at uds is replaced (see RemoveStaleSocket).
func Listen(ctx context.Context, addr, uds string) ([]net.Listener, error) {
	var lns []net.Listener
	closeAll := func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}
	if addr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen for Envoy gRPC on --grpc-addr %s: %w", addr, err)
		}
		lns = append(lns, lis)
	}
	if uds != "" {
		if err := RemoveStaleSocket(uds); err != nil {
			closeAll()
			return nil, err
		}
		lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", uds)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("listen for Envoy gRPC on --grpc-uds %s: %w", uds, err)
		}
		lns = append(lns, lis)
	}
	return lns, nil
}

// RemoveStaleSocket removes a socket a killed process left at path (a clean
// stop removes its own), so a restart can listen again. A socket something
// still answers on, or any other file, is an error and left alone.
func RemoveStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--grpc-uds %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("--grpc-uds %s exists and is not a socket: give the path of a socket to create", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("--grpc-uds %s is in use: another process listens on it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("--grpc-uds %s: remove the stale socket: %w", path, err)
	}
	return nil
}

// GRPCOptions are the operator's settings of the gRPC server.
type GRPCOptions struct {
	// MaxConnAge and MaxConnAgeGrace bound connections' lives
	// (MaxConnectionAgeOption); zero is no bound.
	MaxConnAge, MaxConnAgeGrace time.Duration
	// TLS, if set, serves over TLS (mutual with its client CA).
	TLS *tlsconfig.Reloader
	// ClientSAN, if set, is a DNS name every client certificate must carry
	// (GRPC_CLIENT_TLS_SAN).
	ClientSAN string
	// Extra are added last (tracing's stats handler, the access log).
	Extra []grpc.ServerOption
}

// GRPCServerOptions are ServerOptions with the operator's TLS and
// connection age.
func GRPCServerOptions(o GRPCOptions) []grpc.ServerOption {
	opts := ServerOptions()
	if o.MaxConnAge > 0 || o.MaxConnAgeGrace > 0 {
		opts = append(opts, MaxConnectionAgeOption(o.MaxConnAge, o.MaxConnAgeGrace))
	}
	if o.TLS != nil {
		tc := o.TLS.ServerConfig("h2")
		if o.ClientSAN != "" {
			tc = tlsconfig.RequireClientSAN(tc, o.ClientSAN)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return append(opts, o.Extra...)
}
