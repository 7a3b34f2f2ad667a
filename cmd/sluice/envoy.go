package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/metrics"
)

// envoyConfig is what `sluice serve` hands the Envoy rate limit server.
type envoyConfig struct {
	GRPCAddr  string // --grpc-addr, "" = no gRPC listener
	ConfigDir string // --envoy-config, "" = no Envoy rate limit service
	// Engine is the check engine of the shared store.
	Engine *check.Engine
	Logger *slog.Logger
	// JSONAddr is --envoy-json-addr: a listener of its own for POST /json,
	// the HTTP form of ShouldRateLimit, and GET /healthcheck; "" = no
	// POST /json. It takes no credentials, so it is never on Mux.
	JSONAddr string
	// Mux, if set, gets GET /healthcheck, for probes written for
	// envoyproxy/ratelimit.
	Mux     *http.ServeMux
	Metrics *metrics.Metrics // may be nil
	// ResponseHeaders adds x-ratelimit-* and RateLimit headers to Envoy's
	// responses (--envoy-response-headers).
	ResponseHeaders bool
	// JSONTLS, if set, serves JSONAddr over TLS (--tls-*).
	JSONTLS *tlsconfig.Reloader
	// GRPCTLS, if set, serves GRPCAddr over TLS (--grpc-tls-*).
	GRPCTLS *tlsconfig.Reloader
	// GRPCOptions are added to the gRPC server's (tracing's stats handler).
	GRPCOptions []grpc.ServerOption
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
	if cfg.ConfigDir == "" {
		if cfg.GRPCAddr != "" {
			return nil, errors.New("--grpc-addr serves Envoy's rate limit service, which needs its configuration: set --envoy-config to a directory of envoyproxy/ratelimit YAML files")
		}
		if cfg.JSONAddr != "" {
			return nil, errors.New("--envoy-json-addr serves Envoy's rate limit service as JSON, which needs its configuration: set --envoy-config to a directory of envoyproxy/ratelimit YAML files")
		}
		return noop, nil
	}
	if cfg.Engine == nil {
		return nil, errors.New("the Envoy rate limit service needs a check engine")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	loaded, err := envoyrls.LoadDir(cfg.ConfigDir)
	if err != nil {
		return nil, fmt.Errorf("load the Envoy rate limit configuration (--envoy-config): %w", err)
	}
	srv := envoyrls.NewServer(envoyrls.Options{Engine: cfg.Engine, Metrics: cfg.Metrics, Logger: logger, ResponseHeaders: cfg.ResponseHeaders})
	srv.SetConfig(loaded)
	logger.Info("envoy rate limit configuration loaded", "dir", cfg.ConfigDir, "domains", loaded.Domains())

	watchCtx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		srv.Watch(watchCtx, cfg.ConfigDir, envoyReloadInterval)
	}()

	if cfg.Mux != nil {
		// envoyproxy/ratelimit's HTTP health path, for existing probes. It
		// only reads, so it may share the tenant API's listener; POST /json
		// spends anyone's quota without credentials, so it may not.
		cfg.Mux.Handle("GET /healthcheck", srv.HealthHandler())
	}

	var jsonSrv *http.Server
	jsonDone := make(chan error, 1)
	if cfg.JSONAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.JSONAddr)
		if err != nil {
			stopWatch()
			<-watchDone
			return nil, fmt.Errorf("listen for Envoy's JSON form on --envoy-json-addr %s: %w", cfg.JSONAddr, err)
		}
		jsonSrv = envoyJSONServer(srv, logger)
		jsonSrv.TLSConfig = httpTLS(cfg.JSONTLS)
		logger.Info("envoy rate limit JSON form listening (unauthenticated: keep it private)", "addr", lis.Addr().String(), "tls", tlsMode(cfg.JSONTLS))
		go func() { jsonDone <- serveHTTP(jsonSrv, lis) }()
	}

	var gs *grpc.Server
	serveDone := make(chan error, 1)
	if cfg.GRPCAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.GRPCAddr)
		if err != nil {
			if jsonSrv != nil {
				_ = jsonSrv.Close()
			}
			stopWatch()
			<-watchDone
			return nil, fmt.Errorf("listen for Envoy gRPC on --grpc-addr %s: %w", cfg.GRPCAddr, err)
		}
		opts := append(envoyrls.ServerOptions(), cfg.GRPCOptions...)
		if cfg.GRPCTLS != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.GRPCTLS.ServerConfig("h2"))))
		}
		gs = grpc.NewServer(opts...)
		srv.Register(gs)
		logger.Info("envoy rate limit service listening", "addr", lis.Addr().String(), "tls", tlsMode(cfg.GRPCTLS))
		go func() { serveDone <- gs.Serve(lis) }()
	}

	return func(ctx context.Context) error {
		stopWatch()
		<-watchDone
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
			if err := <-serveDone; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errs = append(errs, fmt.Errorf("envoy gRPC server: %w", err))
			}
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
	return newAPIServer(mux, logger)
}
