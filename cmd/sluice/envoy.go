package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/metrics"
)

// envoyConfig is what `sluice serve` hands the Envoy rate limit server.
type envoyConfig struct {
	GRPCAddr  string // --grpc-addr, "" = no gRPC listener
	ConfigDir string // --envoy-config, "" = no Envoy rate limit service
	// XDSServer, instead of ConfigDir, is the xDS management server the
	// configuration comes from (--envoy-xds-server), with its options.
	XDSServer        string
	XDSNodeID        string
	XDSRetryInterval time.Duration
	// XDSTLS, if set, dials XDSServer over TLS.
	XDSTLS *envoyrls.XDSTLS
	// XDSNodeMetadata and XDSHeaders go to the xDS server.
	XDSNodeMetadata, XDSHeaders map[string]string
	// RatelimitKeys marks default fixed windows for envoyproxy/ratelimit's
	// keys (--envoy-key-format ratelimit); the store must be wrapped too.
	RatelimitKeys bool
	// Engine is the check engine of the shared store.
	Engine *check.Engine
	Logger *slog.Logger
	// JSONAddr is --envoy-json-addr: a listener of its own for POST /json,
	// the HTTP form of ShouldRateLimit, and GET /healthcheck; "" = no
	// POST /json. It takes no credentials, so it is never on Mux.
	JSONAddr string
	// Mux, if set, gets GET /healthcheck, for probes written for
	// envoyproxy/ratelimit.
	Mux *http.ServeMux
	// JSONOnMux serves POST /json on Mux too, as envoyproxy/ratelimit's HTTP
	// port does: in ENV mode, where Mux carries no credentials to protect.
	JSONOnMux bool
	// Counting is how domains' hits count unless their YAML says.
	Counting envoyrls.Counting
	// ServeBeforeConfig reports SERVING before the first configuration.
	ServeBeforeConfig bool
	// StopIncrement is envoyrls.Options.StopIncrementWhenOverLimit.
	StopIncrement bool
	Metrics       *metrics.Metrics // may be nil
	// ResponseHeaders adds x-ratelimit-* and RateLimit headers to Envoy's
	// responses (--envoy-response-headers).
	ResponseHeaders bool
	// Flags are the --envoy-* behaviours of envoyproxy/ratelimit.
	Flags envoyFlags
	// JSONTLS, if set, serves JSONAddr over TLS (--tls-*).
	JSONTLS *tlsconfig.Reloader
	// GRPCTLS, if set, serves GRPCAddr over TLS (--grpc-tls-*).
	GRPCTLS *tlsconfig.Reloader
	// GRPCClientSAN, if set, is a name every client certificate must carry.
	GRPCClientSAN string
	// GRPCUDS is a unix socket to serve gRPC on (--grpc-uds).
	GRPCUDS string
	// MaxConnAge and MaxConnAgeGrace bound gRPC connections' lives.
	MaxConnAge, MaxConnAgeGrace time.Duration
	// DebugAddr serves /rlconfig (--debug-addr).
	DebugAddr string
	// Server, if set, is given the server once started (for the console).
	Server *atomic.Pointer[envoyrls.Server]
	// GRPCOptions are added to the gRPC server's (tracing's stats handler).
	GRPCOptions []grpc.ServerOption
	// Stats, if set, counts under envoyproxy/ratelimit's stat names.
	Stats *envoyrls.EnvStats
}

// envoyFlags are the flags that select envoyproxy/ratelimit's behaviours,
// each named after the environment variable it mirrors there.
type envoyFlags struct {
	MergeDomains    bool   // --envoy-merge-domains (MERGE_DOMAIN_CONFIG)
	IgnoreDotfiles  bool   // --envoy-ignore-dotfiles (RUNTIME_IGNOREDOTFILES)
	HeaderStyle     string // --envoy-header-style: envoy or ietf
	HeaderLimit     string // --envoy-header-limit (LIMIT_LIMIT_HEADER)
	HeaderRemaining string // --envoy-header-remaining (LIMIT_REMAINING_HEADER)
	HeaderReset     string // --envoy-header-reset (LIMIT_RESET_HEADER)
	Shadow          bool   // --envoy-shadow (SHADOW_MODE)
	DynamicMetadata bool   // --envoy-dynamic-metadata (RESPONSE_DYNAMIC_METADATA)
}

// options checks the flags and turns them into the server's options.
func (f envoyFlags) options() (envoyrls.Options, error) {
	o := envoyrls.Options{
		HeaderStyle:     envoyrls.HeaderStyle(f.HeaderStyle),
		HeaderLimit:     f.HeaderLimit,
		HeaderRemaining: f.HeaderRemaining,
		HeaderReset:     f.HeaderReset,
		Shadow:          f.Shadow,
		DynamicMetadata: f.DynamicMetadata,
		Load:            envoyrls.LoadOptions{MergeDomains: f.MergeDomains, IgnoreDotfiles: f.IgnoreDotfiles},
	}
	return o, o.CheckHeaders()
}

// envoyReloadInterval is how often the configuration directory is polled.
const envoyReloadInterval = time.Second

// startEnvoy loads the Envoy rate limit configuration, starts watching it for
// changes, registers GET /healthcheck on cfg.Mux, serves POST /json and GET
// /healthcheck on cfg.JSONAddr when it is set and, when cfg.GRPCAddr is set,
// the gRPC RateLimitService (with health checking) on it. With neither
// ConfigDir, GRPCAddr nor JSONAddr it does nothing. stop shuts the servers
// down gracefully (forcibly once ctx ends) and stops the watcher.
func startEnvoy(ctx context.Context, cfg envoyConfig) (stop func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	opts, err := cfg.Flags.options()
	if err != nil {
		return nil, err
	}
	if cfg.ConfigDir == "" && cfg.XDSServer == "" {
		const need = ", which needs its configuration: set --envoy-config to a directory of envoyproxy/ratelimit YAML files, or --envoy-xds-server"
		switch {
		case cfg.GRPCAddr != "":
			return nil, errors.New("--grpc-addr serves Envoy's rate limit service" + need)
		case cfg.JSONAddr != "":
			return nil, errors.New("--envoy-json-addr serves Envoy's rate limit service as JSON" + need)
		case cfg.GRPCUDS != "":
			return nil, errors.New("--grpc-uds serves Envoy's rate limit service" + need)
		case cfg.DebugAddr != "":
			return nil, errors.New("--debug-addr shows Envoy's rate limit configuration" + need)
		}
		return noop, nil
	}
	if cfg.ConfigDir != "" && cfg.XDSServer != "" {
		return nil, errors.New("--envoy-config and --envoy-xds-server both give the Envoy rate limit configuration; use one")
	}
	if cfg.Engine == nil {
		return nil, errors.New("the Envoy rate limit service needs a check engine")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	opts.Engine, opts.Metrics, opts.Logger, opts.ResponseHeaders = cfg.Engine, cfg.Metrics, logger, cfg.ResponseHeaders
	opts.RatelimitKeys, opts.Counting, opts.ServeBeforeConfig = cfg.RatelimitKeys, cfg.Counting, cfg.ServeBeforeConfig
	opts.StopIncrementWhenOverLimit = cfg.StopIncrement
	opts.Stats = cfg.Stats
	srv := envoyrls.NewServer(opts)
	stopWatch, err := srv.Follow(envoyrls.Source{Dir: cfg.ConfigDir, Interval: envoyReloadInterval, XDSServer: cfg.XDSServer, XDSTLS: cfg.XDSTLS,
		XDS: envoyrls.XDSOptions{NodeID: cfg.XDSNodeID, NodeMetadata: cfg.XDSNodeMetadata, Headers: cfg.XDSHeaders, RetryInterval: cfg.XDSRetryInterval}})
	if err != nil {
		return nil, err
	}
	if cfg.Server != nil {
		cfg.Server.Store(srv)
	}

	if cfg.Mux != nil {
		// envoyproxy/ratelimit's HTTP health path, for existing probes. It
		// only reads, so it may share the tenant API's listener; POST /json
		// spends anyone's quota without credentials, so it may not.
		cfg.Mux.Handle("GET /healthcheck", srv.HealthHandler())
		if cfg.JSONOnMux {
			cfg.Mux.Handle("POST /json", srv.JSONHandler())
		}
	}

	var jsonSrv *http.Server
	jsonDone := make(chan error, 1)
	if cfg.JSONAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.JSONAddr)
		if err != nil {
			stopWatch()
			return nil, fmt.Errorf("listen for Envoy's JSON form on --envoy-json-addr %s: %w", cfg.JSONAddr, err)
		}
		jsonSrv = envoyJSONServer(srv, logger)
		jsonSrv.TLSConfig = tlsconfig.HTTPConfig(cfg.JSONTLS)
		logger.Info("envoy rate limit JSON form listening (unauthenticated: keep it private)", "addr", lis.Addr().String(), "tls", tlsconfig.Mode(cfg.JSONTLS))
		go func() { jsonDone <- tlsconfig.ServeHTTP(jsonSrv, lis) }()
	}

	var debugSrv *http.Server
	if cfg.DebugAddr != "" {
		if debugSrv, err = srv.ServeDebug(ctx, cfg.DebugAddr, cfg.JSONTLS); err != nil {
			if jsonSrv != nil {
				_ = jsonSrv.Close()
			}
			stopWatch()
			return nil, err
		}
	}

	var gs *grpc.Server
	var serveDone chan error
	if cfg.GRPCAddr != "" || cfg.GRPCUDS != "" {
		lns, err := envoyrls.Listen(ctx, cfg.GRPCAddr, cfg.GRPCUDS)
		if err != nil {
			if jsonSrv != nil {
				_ = jsonSrv.Close()
			}
			if debugSrv != nil {
				_ = debugSrv.Close()
			}
			stopWatch()
			return nil, err
		}
		gs = grpc.NewServer(envoyrls.GRPCServerOptions(envoyrls.GRPCOptions{MaxConnAge: cfg.MaxConnAge, MaxConnAgeGrace: cfg.MaxConnAgeGrace,
			TLS: cfg.GRPCTLS, ClientSAN: cfg.GRPCClientSAN, Extra: cfg.GRPCOptions})...)
		srv.Register(gs)
		serveDone = make(chan error, len(lns))
		for _, lis := range lns {
			logger.Info("envoy rate limit service listening", "addr", lis.Addr().String(), "network", lis.Addr().Network(), "tls", tlsconfig.Mode(cfg.GRPCTLS))
			go func() { serveDone <- gs.Serve(lis) }()
		}
	}

	return func(ctx context.Context) error {
		stopWatch()
		// NOT_SERVING first, on gRPC and on GET /healthcheck alike, so
		// probes move traffic away before the listeners close.
		srv.Shutdown()
		var errs []error
		if jsonSrv != nil {
			if err := jsonSrv.Shutdown(ctx); err != nil {
				_ = jsonSrv.Close()
			}
			if err := <-jsonDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs = append(errs, fmt.Errorf("envoy JSON server: %w", err))
			}
		}
		if gs != nil {
			stopped := make(chan struct{})
			go func() {
				gs.GracefulStop()
				close(stopped)
			}()
			select {
			case <-stopped:
			case <-ctx.Done():
				gs.Stop()
				<-stopped
			}
			for range cap(serveDone) {
				if err := <-serveDone; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
					errs = append(errs, fmt.Errorf("envoy gRPC server: %w", err))
				}
			}
		}
		if debugSrv != nil {
			_ = debugSrv.Close()
		}
		return errors.Join(errs...)
	}, nil
}

// envoyJSONServer serves POST /json and GET /healthcheck, as
// envoyproxy/ratelimit's HTTP port does, with the same timeouts as the main
// listener.
func envoyJSONServer(srv *envoyrls.Server, logger *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("POST /json", srv.JSONHandler())
	mux.Handle("GET /healthcheck", srv.HealthHandler())
	return httpapi.NewServer(mux, logger)
}
