package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/envoyrls"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// envoyKeyFormatRatelimit is the --envoy-key-format of envoyproxy/ratelimit's keys.
const envoyKeyFormatRatelimit = envoyrls.KeyFormatRatelimit

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

// xdsTLS is nil when --envoy-xds-tls is off.
func (cfg serveConfig) xdsTLS() *envoyrls.XDSTLS {
	if !cfg.EnvoyXDSTLS {
		return nil
	}
	return &envoyrls.XDSTLS{CA: cfg.EnvoyXDSTLSCA, Cert: cfg.EnvoyXDSTLSCert, Key: cfg.EnvoyXDSTLSKey, ServerName: cfg.EnvoyXDSTLSName}
}

// validateXDSTLS checks the --envoy-xds-tls* flags before anything is read.
func (cfg serveConfig) validateXDSTLS() error {
	files := cfg.EnvoyXDSTLSCA != "" || cfg.EnvoyXDSTLSCert != "" || cfg.EnvoyXDSTLSKey != "" || cfg.EnvoyXDSTLSName != ""
	switch {
	case files && !cfg.EnvoyXDSTLS:
		return errors.New("--envoy-xds-tls-* are set but --envoy-xds-tls is not: set it to dial the xDS server over TLS")
	case cfg.EnvoyXDSTLS && cfg.EnvoyXDSServer == "":
		return errors.New("--envoy-xds-tls is set but --envoy-xds-server is not: there is no xDS server to dial")
	}
	return envoyrls.XDSTLS{Cert: cfg.EnvoyXDSTLSCert, Key: cfg.EnvoyXDSTLSKey}.Validate()
}
