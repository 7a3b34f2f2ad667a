package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// warnIfNoDomain warns when a load found no domain: every descriptor is then
// answered OK, which is most often a mount at the wrong path.
func warnIfNoDomain(log *slog.Logger, dir string, cfg *envoyrls.Config) {
	if cfg == nil || len(cfg.Domains()) > 0 {
		return
	}
	if dir == "" {
		log.Warn("the xDS server sent no RateLimitConfig resource: no domain is loaded and every request is answered OK")
		return
	}
	log.Warn("the Envoy rate limit configuration directory holds no configuration file: no domain is loaded and every request is answered OK", "dir", dir)
}

// startEnvoyConfigSource loads srv's configuration from the directory (its
// first load must succeed) or the xDS server, and keeps it current, counting
// every load, until stop is called.
func startEnvoyConfigSource(cfg envoyConfig, srv *envoyrls.Server, log *slog.Logger) (stop func(), err error) {
	onLoad := func(c *envoyrls.Config, err error) {
		cfg.Metrics.EnvoyConfigLoaded(err == nil)
		warnIfNoDomain(log, cfg.ConfigDir, c)
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	if cfg.XDSServer != "" {
		creds, err := cfg.XDSTLS.credentials()
		if err != nil {
			stopWatch()
			return nil, err
		}
		conn, err := grpc.NewClient(cfg.XDSServer, grpc.WithTransportCredentials(creds))
		if err != nil {
			stopWatch()
			return nil, fmt.Errorf("--envoy-xds-server %s: %w", cfg.XDSServer, err)
		}
		log.Info("envoy rate limit configuration from xDS: not serving until the first one arrives", "server", cfg.XDSServer, "node_id", cfg.XDSNodeID,
			"tls", cfg.XDSTLS.mode())
		go func() {
			defer close(watchDone)
			defer conn.Close()
			srv.WatchXDS(watchCtx, conn, envoyrls.XDSOptions{NodeID: cfg.XDSNodeID, NodeMetadata: cfg.XDSNodeMetadata, Headers: cfg.XDSHeaders,
				RetryInterval: cfg.XDSRetryInterval, OnLoad: onLoad})
		}()
	} else {
		loaded, err := envoyrls.Load(cfg.ConfigDir, envoyrls.LoadOptions{MergeDomains: cfg.Flags.MergeDomains, IgnoreDotfiles: cfg.Flags.IgnoreDotfiles})
		if err != nil {
			stopWatch()
			cfg.Metrics.EnvoyConfigLoaded(false)
			return nil, fmt.Errorf("load the Envoy rate limit configuration (--envoy-config): %w", err)
		}
		srv.SetConfig(loaded)
		log.Info("envoy rate limit configuration loaded", "dir", cfg.ConfigDir, "domains", loaded.Domains())
		for _, w := range loaded.Warnings() {
			log.Warn("envoy rate limit configuration: "+w, "dir", cfg.ConfigDir)
		}
		onLoad(loaded, nil)
		go func() {
			defer close(watchDone)
			srv.WatchDir(watchCtx, cfg.ConfigDir, envoyrls.WatchOptions{Interval: envoyReloadInterval, OnLoad: onLoad})
		}()
	}
	return func() {
		stopWatch()
		<-watchDone
	}, nil
}

// startEnvoyDebug serves /rlconfig on cfg.DebugAddr, apart from every other
// listener as in envoyproxy/ratelimit.
func startEnvoyDebug(ctx context.Context, cfg envoyConfig, srv *envoyrls.Server, log *slog.Logger) (*http.Server, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.DebugAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for the debug listener on --debug-addr %s: %w", cfg.DebugAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /rlconfig", srv.ConfigDumpHandler())
	debugSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: httpTLS(cfg.JSONTLS),
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = serveHTTP(debugSrv, lis) }()
	log.Info("debug listener serving /rlconfig", "addr", lis.Addr().String(), "tls", tlsMode(cfg.JSONTLS))
	return debugSrv, nil
}

// grpcListeners opens the gRPC listeners: TCP on GRPCAddr, a unix socket on
// GRPCUDS, or both.
func grpcListeners(ctx context.Context, cfg envoyConfig) ([]net.Listener, error) {
	var lns []net.Listener
	if cfg.GRPCAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("listen for Envoy gRPC on --grpc-addr %s: %w", cfg.GRPCAddr, err)
		}
		lns = append(lns, lis)
	}
	if cfg.GRPCUDS != "" {
		if err := removeStaleSocket(cfg.GRPCUDS); err != nil {
			closeAllListeners(lns)
			return nil, err
		}
		lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", cfg.GRPCUDS)
		if err != nil {
			closeAllListeners(lns)
			return nil, fmt.Errorf("listen for Envoy gRPC on --grpc-uds %s: %w", cfg.GRPCUDS, err)
		}
		lns = append(lns, lis)
	}
	return lns, nil
}

// removeStaleSocket removes a socket a killed process left at path (a clean
// stop removes its own), so a restart can listen again. A socket something
// still answers on, or any other file, is an error and left alone.
func removeStaleSocket(path string) error {
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

func closeAllListeners(lns []net.Listener) {
	for _, l := range lns {
		_ = l.Close()
	}
}

// grpcServerOptions are the rate limit service's options with the
// operator's TLS and connection age.
func grpcServerOptions(cfg envoyConfig) []grpc.ServerOption {
	opts := envoyrls.ServerOptions()
	if cfg.MaxConnAge > 0 || cfg.MaxConnAgeGrace > 0 {
		opts = append(opts, envoyrls.MaxConnectionAgeOption(cfg.MaxConnAge, cfg.MaxConnAgeGrace))
	}
	if cfg.GRPCTLS != nil {
		tc := cfg.GRPCTLS.ServerConfig("h2")
		if cfg.GRPCClientSAN != "" {
			tc = requireClientSAN(tc, cfg.GRPCClientSAN)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	return append(opts, cfg.GRPCOptions...)
}

// requireClientSAN makes c refuse a client certificate that does not carry
// san as a DNS name (as envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN does), on
// top of the CA check c already makes.
func requireClientSAN(c *tls.Config, san string) *tls.Config {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
			return fmt.Errorf("the client certificate is not for %q (--grpc-tls-client-san): %w", san, err)
		}
		return nil
	}
	c.VerifyConnection = verify
	if next := c.GetConfigForClient; next != nil {
		// The reloading configuration builds one per handshake: check there.
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := next(hello)
			if cc != nil {
				cc.VerifyConnection = verify
			}
			return cc, err
		}
	}
	return c
}

// Values of --envoy-key-format.
const (
	envoyKeyFormatSluice    = "sluice"
	envoyKeyFormatRatelimit = envoyrls.KeyFormatRatelimit
)

// withRatelimitKeys wraps rs so the Envoy checks marked for it are counted
// under envoyproxy/ratelimit's keys, on a Redis connection of their own. A
// Redis that does not answer at start is connected to in the background, as
// the main store is; meanwhile every check fails at once as unavailable, and
// the rules' failure modes answer.
func withRatelimitKeys(rs sluice.Store, redisURL string, redisTLS *tls.Config, prefix string, log *slog.Logger) (sluice.Store, func() error, error) {
	// No flush delay: the options this connection had before it could wait.
	conn, err := sluiceredis.Connect(redisURL, sluiceredis.Options{MaxFlushDelay: -1, TLS: redisTLS}, log.With("connection", "--envoy-key-format ratelimit"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to Redis for --envoy-key-format ratelimit: %w", err)
	}
	return envoyrls.RatelimitKeysOnceConnected(rs, conn.Client, prefix), conn.Close, nil
}

// xdsTLSFiles are the TLS settings of the connection to the xDS server.
type xdsTLSFiles struct{ ca, cert, key, serverName string }

// xdsTLS is nil when --envoy-xds-tls is off.
func (cfg serveConfig) xdsTLS() *xdsTLSFiles {
	if !cfg.EnvoyXDSTLS {
		return nil
	}
	return &xdsTLSFiles{cfg.EnvoyXDSTLSCA, cfg.EnvoyXDSTLSCert, cfg.EnvoyXDSTLSKey, cfg.EnvoyXDSTLSName}
}

// validateXDSTLS checks the --envoy-xds-tls* flags before anything is read.
func (cfg serveConfig) validateXDSTLS() error {
	files := cfg.EnvoyXDSTLSCA != "" || cfg.EnvoyXDSTLSCert != "" || cfg.EnvoyXDSTLSKey != "" || cfg.EnvoyXDSTLSName != ""
	switch {
	case files && !cfg.EnvoyXDSTLS:
		return errors.New("--envoy-xds-tls-* are set but --envoy-xds-tls is not: set it to dial the xDS server over TLS")
	case cfg.EnvoyXDSTLS && cfg.EnvoyXDSServer == "":
		return errors.New("--envoy-xds-tls is set but --envoy-xds-server is not: there is no xDS server to dial")
	case (cfg.EnvoyXDSTLSCert == "") != (cfg.EnvoyXDSTLSKey == ""):
		return errors.New("--envoy-xds-tls-cert and --envoy-xds-tls-key go together: give both for mutual TLS, or neither")
	}
	return nil
}

// credentials reads the files into the transport credentials of the xDS
// connection: plaintext when f is nil. They are read once, at start.
func (f *xdsTLSFiles) credentials() (credentials.TransportCredentials, error) {
	if f == nil {
		return insecure.NewCredentials(), nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		pool, err := tlsconfig.LoadCAPool(f.ca)
		if err != nil {
			return nil, fmt.Errorf("--envoy-xds-tls-ca: %w", err)
		}
		c.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tlsconfig.LoadKeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--envoy-xds-tls-cert / --envoy-xds-tls-key: %w", err)
		}
		c.Certificates = []tls.Certificate{*pair}
	}
	return credentials.NewTLS(c), nil
}

// mode says, for logs, how the xDS server is dialled.
func (f *xdsTLSFiles) mode() string {
	switch {
	case f == nil:
		return "off"
	case f.cert != "":
		return "mutual"
	default:
		return "on"
	}
}
