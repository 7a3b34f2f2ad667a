package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

func init() { rootCmd.AddCommand(newGatewayCmd()) }

type gatewayFlags struct {
	Config          string
	LogLevel        string
	ShutdownTimeout time.Duration
}

func newGatewayCmd() *cobra.Command {
	var flags gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the API gateway (reverse proxy with JWT auth, CORS and rate limits)",
		Long: `Run the API gateway described by --config (a gateway.yaml; see docs/gateway.md):
routes proxied to upstreams, per-route JWT authentication, CORS for an explicit
list of origins, and per-route rate limits keyed by the token's subject (or
another verified claim, or an API-key header), else by the client IP. /healthz
and /metrics are served on a listener of their own, admin_listen (default
127.0.0.1:9081), never on the public one.

The file is reloaded when it changes (a mounted ConfigMap's symlink swap
included) and on SIGHUP: if the new file is invalid, the gateway keeps running
the old configuration and logs why.

Every flag can also be set as SLUICE_<FLAG> (e.g. SLUICE_CONFIG).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if flags.Config == "" {
				return errors.New("--config is required: the path of a gateway.yaml (see docs/gateway.md)")
			}
			log, err := newLogger(cmd.ErrOrStderr(), flags.LogLevel)
			if err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			return runGateway(cmd.Context(), flags, log, hup, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&flags.Config, "config", "", "path of the gateway.yaml configuration (required)")
	f.StringVar(&flags.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&flags.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to let in-flight requests finish on SIGTERM")
	return cmd
}

// runGateway serves the gateway until ctx ends, reloading the configuration
// file on every value from reload. onReload, if set, learns each reload's
// outcome (tests wait on it).
func runGateway(ctx context.Context, flags gatewayFlags, log *slog.Logger, reload <-chan os.Signal, onReload func(error)) error {
	cfg, err := gateway.LoadConfig(flags.Config)
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoCollector())
	traces, err := startTracing(ctx, "sluice-gateway", log)
	if err != nil {
		return err
	}
	defer traces.shutdown()
	// The store the file names, opened as serve opens --redis; a reload
	// cannot change it (the gateway refuses one that names another).
	store, _, closeStore, err := openStore(cfg.Redis, sluiceredis.Options{Prefix: cfg.RedisPrefix}, memory.Options{}, log)
	if err != nil {
		return fmt.Errorf("gateway config %s: %w", flags.Config, err)
	}
	defer closeStore()
	gw, err := gateway.New(cfg, gateway.Options{Store: store, Metrics: metrics.New(registry), Requests: metrics.NewGatewayRequests(registry),
		Gatherer: registry, Logger: log, Tracing: traces.Tracing})
	if err != nil {
		return err
	}
	defer gw.Close()
	changed, err := watchConfigFile(ctx, flags.Config, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (the listen field of %s): %w", cfg.Listen, flags.Config, err)
	}
	srv, err := gateway.NewServer(cfg, gw, log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gateway config %s: %w", flags.Config, err)
	}
	adminSrv, adminAddr, err := startGatewayAdmin(gw, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer adminSrv.Close()
	served := make(chan error, 1)
	go func() { served <- serveHTTP(srv, ln) }()
	log.Info("gateway listening", "addr", ln.Addr().String(), "admin_addr", adminAddr, "tls", gatewayTLSMode(cfg.TLS), "routes", len(cfg.Routes), "config", flags.Config)

	for {
		select {
		case err := <-served:
			return fmt.Errorf("gateway server: %w", err)
		case <-reload:
			err := reloadGateway(gw, flags.Config)
			logReload(log, flags.Config, "SIGHUP", err)
			if onReload != nil {
				onReload(err)
			}
		case <-changed:
			err := reloadGateway(gw, flags.Config)
			logReload(log, flags.Config, "file changed", err)
			if onReload != nil {
				onReload(err)
			}
		case <-ctx.Done():
			log.Info("shutting down", "grace", flags.ShutdownTimeout)
			shutdownCtx, cancel := context.WithTimeout(context.Background(), flags.ShutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(shutdownCtx); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			return nil
		}
	}
}

// gatewayTLSMode says, for logs, how the gateway's listener is served.
func gatewayTLSMode(t *gateway.TLSConfig) string {
	switch {
	case t == nil:
		return "off"
	case t.ClientCAFile != "":
		return "mutual"
	default:
		return "on"
	}
}

func reloadGateway(gw *gateway.Gateway, path string) error {
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		return err
	}
	if cfg.Listen != gw.Listen() {
		return fmt.Errorf("listen: the address cannot change on reload (%s → %s); restart the gateway", gw.Listen(), cfg.Listen)
	}
	return gw.Reload(cfg)
}

// logReload says how a reload ended, and what caused it.
func logReload(log *slog.Logger, path, cause string, err error) {
	if err != nil {
		log.Error("reload refused; still serving the previous configuration", "config", path, "cause", cause, "error", err)
		return
	}
	log.Info("configuration reloaded", "config", path, "cause", cause)
}

// startGatewayAdmin serves the gateway's health and metrics on its
// admin_listen address, plain HTTP: it is meant for loopback or a pod
// network, not the public side.
func startGatewayAdmin(gw *gateway.Gateway, log *slog.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", gw.AdminListen())
	if err != nil {
		return nil, "", fmt.Errorf("listen on admin_listen %s: %w", gw.AdminListen(), err)
	}
	srv := &http.Server{Handler: gw.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln.Addr().String(), nil
}
