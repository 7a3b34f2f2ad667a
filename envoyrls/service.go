package envoyrls

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

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// ServiceConfig is how a process runs the Envoy rate limit service: the
// server's options, where its configuration comes from, and its listeners.
type ServiceConfig struct {
	// Options are the server's; Engine is required once there is a
	// configuration source, Logger defaults to slog.Default().
	Options
	// Source is where the configuration comes from (--envoy-config or
	// --envoy-xds-server); with neither, the service is off.
	Source Source
	// GRPCAddr and GRPCUDS are the gRPC listeners (--grpc-addr, --grpc-uds;
	// "" for none), served with GRPC's settings.
	GRPCAddr, GRPCUDS string
	GRPC              GRPCOptions
	// JSONAddr is --envoy-json-addr: a listener of its own for POST /json,
	// the HTTP form of ShouldRateLimit, and GET /healthcheck; "" = no
	// POST /json. It takes no credentials, so it is never on Mux. JSONTLS,
	// if set, serves it (and DebugAddr) over TLS.
	JSONAddr string
	JSONTLS  *tlsconfig.Reloader
	// NewHTTPServer, if set, builds the JSON listener's HTTP server, as the
	// process builds its other listeners'.
	NewHTTPServer func(*http.ServeMux, *slog.Logger) *http.Server
	// Mux, if set, gets GET /healthcheck, for probes written for
	// envoyproxy/ratelimit.
	Mux *http.ServeMux
	// JSONOnMux serves POST /json on Mux too, as envoyproxy/ratelimit's HTTP
	// port does: in ENV mode, where Mux carries no credentials to protect.
	JSONOnMux bool
	// DebugAddr serves /rlconfig (--debug-addr).
	DebugAddr string
	// Started, if set, is given the server once started (for the console).
	Started *atomic.Pointer[Server]
}

// StartService loads the configuration, starts following it, registers GET
// /healthcheck on cfg.Mux, serves POST /json and GET /healthcheck on
// cfg.JSONAddr when it is set and, on cfg.GRPCAddr and cfg.GRPCUDS, the gRPC
// RateLimitService (with health checking). With no configuration source and
// no listener it does nothing. stop shuts the servers down gracefully
// (forcibly once ctx ends) and stops following the configuration.
func StartService(ctx context.Context, cfg ServiceConfig) (stop func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if err := cfg.CheckHeaders(); err != nil {
		return nil, err
	}
	src := cfg.Source
	if src.Dir == "" && src.XDSServer == "" {
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
	if src.Dir != "" && src.XDSServer != "" {
		return nil, errors.New("--envoy-config and --envoy-xds-server both give the Envoy rate limit configuration; use one")
	}
	if cfg.Engine == nil {
		return nil, errors.New("the Envoy rate limit service needs a check engine")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	logger := cfg.Logger
	srv := NewServer(cfg.Options)
	stopWatch, err := srv.Follow(src)
	if err != nil {
		return nil, err
	}
	if cfg.Started != nil {
		cfg.Started.Store(srv)
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

	// Each listener started is closed again if a later one fails.
	var started []func()
	fail := func(err error) (func(context.Context) error, error) {
		for i := len(started) - 1; i >= 0; i-- {
			started[i]()
		}
		stopWatch()
		return nil, err
	}

	var jsonSrv *http.Server
	jsonDone := make(chan error, 1)
	if cfg.JSONAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.JSONAddr)
		if err != nil {
			return fail(fmt.Errorf("listen for Envoy's JSON form on --envoy-json-addr %s: %w", cfg.JSONAddr, err))
		}
		jsonSrv = cfg.jsonServer(srv)
		jsonSrv.TLSConfig = tlsconfig.HTTPConfig(cfg.JSONTLS)
		logger.Info("envoy rate limit JSON form listening (unauthenticated: keep it private)", "addr", lis.Addr().String(), "tls", tlsconfig.Mode(cfg.JSONTLS))
		go func() { jsonDone <- tlsconfig.ServeHTTP(jsonSrv, lis) }()
		started = append(started, func() { _ = jsonSrv.Close() })
	}

	var debugSrv *http.Server
	if cfg.DebugAddr != "" {
		if debugSrv, err = srv.ServeDebug(ctx, cfg.DebugAddr, cfg.JSONTLS); err != nil {
			return fail(err)
		}
		started = append(started, func() { _ = debugSrv.Close() })
	}

	var gs *grpc.Server
	var serveDone chan error
	if cfg.GRPCAddr != "" || cfg.GRPCUDS != "" {
		lns, err := Listen(ctx, cfg.GRPCAddr, cfg.GRPCUDS)
		if err != nil {
			return fail(err)
		}
		gs = grpc.NewServer(GRPCServerOptions(cfg.GRPC)...)
		srv.Register(gs)
		serveDone = make(chan error, len(lns))
		for _, lis := range lns {
			logger.Info("envoy rate limit service listening", "addr", lis.Addr().String(), "network", lis.Addr().Network(), "tls", tlsconfig.Mode(cfg.GRPC.TLS))
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

// jsonServer serves POST /json and GET /healthcheck, as
// envoyproxy/ratelimit's HTTP port does.
func (cfg ServiceConfig) jsonServer(srv *Server) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("POST /json", srv.JSONHandler())
	mux.Handle("GET /healthcheck", srv.HealthHandler())
	if cfg.NewHTTPServer != nil {
		return cfg.NewHTTPServer(mux, cfg.Logger)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
}
