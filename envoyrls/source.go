package envoyrls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// Source says where a Server's configuration comes from: a directory of
// files, or an xDS management server (never both).
type Source struct {
	// Dir is the directory of envoyproxy/ratelimit YAML files (--envoy-config).
	Dir string
	// Interval is how often Dir is polled for changes (default 1s).
	Interval time.Duration
	// XDSServer is the host:port of the management server
	// (--envoy-xds-server); XDS its options (OnLoad is Follow's own).
	XDSServer string
	XDS       XDSOptions
	// XDSTLS, if set, dials XDSServer over TLS.
	XDSTLS *XDSTLS
}

// Follow puts the configuration of src in force and keeps it current until
// stop is called, counting every load in the server's metrics. A directory
// must load the first time (a typo in a file stops the start); an xDS
// server is followed in the background, and the server answers UNAVAILABLE
// until its first configuration arrives.
func (s *Server) Follow(src Source) (stop func(), err error) {
	onLoad := func(c *Config, err error) {
		s.metrics.EnvoyConfigLoaded(err == nil)
		s.warnIfNoDomain(src.Dir, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if src.XDSServer != "" {
		creds, err := src.XDSTLS.Credentials()
		if err != nil {
			cancel()
			return nil, err
		}
		conn, err := grpc.NewClient(src.XDSServer, grpc.WithTransportCredentials(creds))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("--envoy-xds-server %s: %w", src.XDSServer, err)
		}
		s.log.Info("envoy rate limit configuration from xDS: not serving until the first one arrives", "server", src.XDSServer,
			"node_id", src.XDS.NodeID, "tls", src.XDSTLS.Mode())
		opts := src.XDS
		opts.OnLoad = onLoad
		go func() {
			defer close(done)
			defer conn.Close()
			s.WatchXDS(ctx, conn, opts)
		}()
	} else {
		loaded, err := Load(src.Dir, s.load)
		if err != nil {
			cancel()
			s.metrics.EnvoyConfigLoaded(false)
			return nil, fmt.Errorf("load the Envoy rate limit configuration (--envoy-config): %w", err)
		}
		s.SetConfig(loaded)
		s.log.Info("envoy rate limit configuration loaded", "dir", src.Dir, "domains", loaded.Domains())
		for _, w := range loaded.Warnings() {
			s.log.Warn("envoy rate limit configuration: "+w, "dir", src.Dir)
		}
		onLoad(loaded, nil)
		go func() {
			defer close(done)
			s.WatchDir(ctx, src.Dir, WatchOptions{Interval: src.Interval, OnLoad: onLoad})
		}()
	}
	return func() {
		cancel()
		<-done
	}, nil
}

// warnIfNoDomain warns when a load found no domain: every descriptor is then
// answered OK, which is most often a mount at the wrong path.
func (s *Server) warnIfNoDomain(dir string, cfg *Config) {
	if cfg == nil || len(cfg.Domains()) > 0 {
		return
	}
	if dir == "" {
		s.log.Warn("the xDS server sent no RateLimitConfig resource: no domain is loaded and every request is answered OK")
		return
	}
	s.log.Warn("the Envoy rate limit configuration directory holds no configuration file: no domain is loaded and every request is answered OK", "dir", dir)
}

// XDSTLS is the TLS of the connection to the xDS server
// (--envoy-xds-tls-*, CONFIG_GRPC_XDS_SERVER_TLS_* and _CLIENT_TLS_*).
type XDSTLS struct {
	// CA holds the CA certificates the server's certificate must chain to
	// (default: the system's).
	CA string
	// Cert and Key are the client certificate, for mutual TLS.
	Cert, Key string
	// ServerName is the name the server's certificate must carry (default:
	// the host of the server's address).
	ServerName string
}

// Validate checks that the files go together, before any is read.
func (t XDSTLS) Validate() error {
	if (t.Cert == "") != (t.Key == "") {
		return errors.New("--envoy-xds-tls-cert and --envoy-xds-tls-key go together: give both for mutual TLS, or neither")
	}
	return nil
}

// Credentials reads the files into the transport credentials of the xDS
// connection: plaintext when t is nil. They are read once, at start.
func (t *XDSTLS) Credentials() (credentials.TransportCredentials, error) {
	if t == nil {
		return insecure.NewCredentials(), nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pool, err := tlsconfig.LoadCAPool(t.CA)
		if err != nil {
			return nil, fmt.Errorf("--envoy-xds-tls-ca: %w", err)
		}
		c.RootCAs = pool
	}
	if t.Cert != "" {
		pair, err := tlsconfig.LoadKeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("--envoy-xds-tls-cert / --envoy-xds-tls-key: %w", err)
		}
		c.Certificates = []tls.Certificate{*pair}
	}
	return credentials.NewTLS(c), nil
}

// Mode says, for logs, how the xDS server is dialled: off, on or mutual.
func (t *XDSTLS) Mode() string {
	switch {
	case t == nil:
		return "off"
	case t.Cert != "":
		return "mutual"
	default:
		return "on"
	}
}
