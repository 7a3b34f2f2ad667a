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

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/metrics"
)

// envoyConfig is what `sluice serve` hands the Envoy rate limit server.
type envoyConfig struct {
	GRPCAddr  string // --grpc-addr, "" = no gRPC listener
	ConfigDir string // --envoy-config, "" = no Envoy rate limit service
	// Engine is the check engine of the shared store.
	Engine *check.Engine
	Logger *slog.Logger
	// Mux, if set, gets POST /json, the HTTP form of ShouldRateLimit.
	Mux     *http.ServeMux
	Metrics *metrics.Metrics // may be nil
	// ResponseHeaders adds x-ratelimit-* and RateLimit headers to Envoy's
	// responses (--envoy-response-headers).
	ResponseHeaders bool
}

// envoyReloadInterval is how often the configuration directory is polled.
const envoyReloadInterval = time.Second

// startEnvoy loads the Envoy rate limit configuration, starts watching it for
// changes, registers POST /json and GET /healthcheck on cfg.Mux and, when cfg.GRPCAddr is set,
// serves the gRPC RateLimitService (with health checking) on it. With
// neither ConfigDir nor GRPCAddr it does nothing. stop shuts the gRPC server
// down gracefully (forcibly once ctx ends) and stops the watcher.
func startEnvoy(ctx context.Context, cfg envoyConfig) (stop func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if cfg.ConfigDir == "" {
		if cfg.GRPCAddr != "" {
			return nil, errors.New("--grpc-addr serves Envoy's rate limit service, which needs its configuration: set --envoy-config to a directory of envoyproxy/ratelimit YAML files")
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
		cfg.Mux.Handle("POST /json", srv.JSONHandler())
		// envoyproxy/ratelimit's HTTP health path, for existing probes.
		cfg.Mux.Handle("GET /healthcheck", srv.HealthHandler())
	}

	var gs *grpc.Server
	serveDone := make(chan error, 1)
	if cfg.GRPCAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.GRPCAddr)
		if err != nil {
			stopWatch()
			<-watchDone
			return nil, fmt.Errorf("listen for Envoy gRPC on --grpc-addr %s: %w", cfg.GRPCAddr, err)
		}
		gs = grpc.NewServer(envoyrls.ServerOptions()...)
		srv.Register(gs)
		logger.Info("envoy rate limit service listening", "addr", lis.Addr().String())
		go func() { serveDone <- gs.Serve(lis) }()
	}

	return func(ctx context.Context) error {
		stopWatch()
		<-watchDone
		// NOT_SERVING first, on gRPC and on GET /healthcheck alike, so
		// probes move traffic away before the listeners close.
		srv.Shutdown()
		if gs == nil {
			return nil
		}
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
			return fmt.Errorf("envoy gRPC server: %w", err)
		}
		return nil
	}, nil
}
