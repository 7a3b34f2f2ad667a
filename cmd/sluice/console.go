package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/console"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/middleware"
)

// addConsoleFlags declares the web console's flags of sluice serve.
func addConsoleFlags(f *pflag.FlagSet, cfg *serveConfig) {
	f.BoolVar(&cfg.Console, "console", true, "serve the web console at /console/ (on --addr, or on --console-addr)")
	f.StringVar(&cfg.ConsoleAddr, "console-addr", "", "serve the web console on a listener of its own, e.g. 127.0.0.1:8081, instead of on --addr")
	f.StringVar(&cfg.ConsoleSignInFailures, "console-signin-failures", "10/1m", "failed console sign-ins one client address may make per sliding window, LIMIT/WINDOW; past it sign-in answers 429 with Retry-After, counted by the rate-limit store")
	f.StringSliceVar(&cfg.TrustedProxies, "trusted-proxies", nil, "networks or addresses of the proxies in front of sluice serve (e.g. 10.0.0.0/8), whose X-Forwarded-For is believed about the client address (console sign-in limit) and X-Forwarded-Proto: https about TLS (Secure console cookie); default none: the peer address")
}

// validateConsole checks the console's flags.
func (cfg serveConfig) validateConsole() error {
	if !cfg.Console && cfg.ConsoleAddr != "" {
		return errors.New("--console-addr is set but --console=false turns the console off; drop one of them")
	}
	if cfg.ConsoleAddr != "" && cfg.ConsoleAddr == cfg.Addr && !isAnyPort(cfg.Addr) {
		return fmt.Errorf("--console-addr %s is --addr too; leave --console-addr unset to serve the console on --addr", cfg.ConsoleAddr)
	}
	if _, err := cfg.signInFailures(); err != nil {
		return err
	}
	_, err := cfg.trustedProxies()
	return err
}

// signInFailures reads --console-signin-failures.
func (cfg serveConfig) signInFailures() (sluice.Limit, error) {
	if cfg.ConsoleSignInFailures == "" {
		return console.DefaultSignInFailures, nil
	}
	l, err := sluice.ParseLimitSpec(sluice.AlgorithmSlidingWindow, cfg.ConsoleSignInFailures)
	if err != nil {
		return l, fmt.Errorf("--console-signin-failures %q: %w", cfg.ConsoleSignInFailures, err)
	}
	return l.Named("failures"), nil
}

// trustedProxies reads --trusted-proxies.
func (cfg serveConfig) trustedProxies() (middleware.TrustedProxies, error) {
	cidrs, err := middleware.ParseCIDRs(cfg.TrustedProxies)
	if err != nil {
		return middleware.TrustedProxies{}, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return middleware.TrustedProxies{CIDRs: cidrs}, nil
}

func isAnyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// consoleDeps is what the console is built on.
type consoleDeps struct {
	API       *httpapi.API
	Engine    *check.Engine
	StorePing func(context.Context) error
	// Envoy holds the Envoy rate limit server once started (nil: off).
	Envoy  *atomic.Pointer[envoyrls.Server]
	Mux    *http.ServeMux
	TLS    *tlsconfig.Reloader
	Logger *slog.Logger
}

// startConsole mounts the web console on d.Mux, or serves it on
// --console-addr; stop closes that listener.
func startConsole(cfg serveConfig, d consoleDeps) (stop func() error, err error) {
	noop := func() error { return nil }
	if !cfg.Console {
		return noop, nil
	}
	storeName := "memory"
	if cfg.Redis != "" {
		storeName = "redis"
	}
	failures, err := cfg.signInFailures()
	if err != nil {
		return nil, err
	}
	trusted, err := cfg.trustedProxies()
	if err != nil {
		return nil, err
	}
	c, err := console.New(console.Options{
		API: d.API, Engine: d.Engine, StoreName: storeName, StorePing: d.StorePing, Logger: d.Logger,
		SignInFailures: failures, ClientAddr: middleware.ClientIP(trusted), OverTLS: console.ForwardedTLS(trusted),
		EnvoyConfig: func() *envoyrls.Config {
			if srv := d.Envoy.Load(); srv != nil {
				return srv.Config()
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	if cfg.ConsoleAddr == "" {
		c.Register(d.Mux)
		return noop, nil
	}
	return c.Serve(cfg.ConsoleAddr, d.TLS, d.Logger)
}
