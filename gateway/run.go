package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// RunOptions are what Run needs beside the configuration file.
type RunOptions struct {
	// Options are the Gateway's; Store is opened by the caller for the
	// file's redis field, and closed by it after Run returns.
	Options
	// ShutdownTimeout is how long in-flight requests may finish once ctx
	// ends.
	ShutdownTimeout time.Duration
	// Reload reloads the file on every value (SIGHUP); OnReload, if set,
	// learns each reload's outcome.
	Reload   <-chan os.Signal
	OnReload func(error)
}

// Run serves the gateway of the configuration file path, already loaded as
// cfg, until ctx ends: the public listener, the admin listener (health and
// metrics), and a reload whenever the file changes or opts.Reload fires. A
// reload that fails keeps the previous configuration running and is logged.
func Run(ctx context.Context, path string, cfg *Config, opts RunOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
		opts.Logger = log
	}
	gw, err := New(cfg, opts.Options)
	if err != nil {
		return err
	}
	defer gw.Close()
	changed, err := WatchConfigFile(ctx, path, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (the listen field of %s): %w", cfg.Listen, path, err)
	}
	srv, err := NewServer(cfg, gw, log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gateway config %s: %w", path, err)
	}
	adminSrv, adminAddr, err := gw.serveAdmin(log)
	if err != nil {
		ln.Close()
		return err
	}
	defer adminSrv.Close()
	served := make(chan error, 1)
	go func() { served <- tlsconfig.ServeHTTP(srv, ln) }()
	log.Info("gateway listening", "addr", ln.Addr().String(), "admin_addr", adminAddr, "tls", cfg.TLS.mode(), "routes", len(cfg.Routes), "config", path)

	reload := func(cause string) {
		err := gw.reloadFile(path)
		if err != nil {
			log.Error("reload refused; still serving the previous configuration", "config", path, "cause", cause, "error", err)
		} else {
			log.Info("configuration reloaded", "config", path, "cause", cause)
		}
		if opts.OnReload != nil {
			opts.OnReload(err)
		}
	}
	for {
		select {
		case err := <-served:
			return fmt.Errorf("gateway server: %w", err)
		case <-opts.Reload:
			reload("SIGHUP")
		case <-changed:
			reload("file changed")
		case <-ctx.Done():
			log.Info("shutting down", "grace", opts.ShutdownTimeout)
			shutdownCtx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(shutdownCtx); err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			return nil
		}
	}
}

// mode says, for logs, how the gateway's listener is served.
func (t *TLSConfig) mode() string {
	switch {
	case t == nil:
		return "off"
	case t.ClientCAFile != "":
		return "mutual"
	default:
		return "on"
	}
}

// reloadFile loads path again and puts it in force; the listen address
// cannot change without a restart.
func (g *Gateway) reloadFile(path string) error {
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	if cfg.Listen != g.Listen() {
		return fmt.Errorf("listen: the address cannot change on reload (%s → %s); restart the gateway", g.Listen(), cfg.Listen)
	}
	return g.Reload(cfg)
}

// serveAdmin serves the gateway's health and metrics on its admin_listen
// address, plain HTTP: it is meant for loopback or a pod network, not the
// public side.
func (g *Gateway) serveAdmin(log *slog.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", g.AdminListen())
	if err != nil {
		return nil, "", fmt.Errorf("listen on admin_listen %s: %w", g.AdminListen(), err)
	}
	srv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln.Addr().String(), nil
}
