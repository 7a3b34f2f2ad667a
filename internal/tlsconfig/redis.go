package tlsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
)

// RedisClient is the TLS of the connections to Redis, as sluice serve's
// --redis-tls* flags (envoyproxy/ratelimit's REDIS_TLS_* variables) give
// it: On, or a rediss:// URL, turns it on; the files are a private CA, a
// client certificate (Redis' tls-auth-clients) and the name to check.
// Errors name those flags.
type RedisClient struct {
	On bool
	ClientFiles
}

// Enabled reports whether TLS is on: by flag, or by a rediss:// URL.
func (r RedisClient) Enabled(redisURL string) bool {
	return r.On || strings.HasPrefix(redisURL, "rediss://")
}

// Validate checks the settings against the Redis URL before any file is
// read.
func (r RedisClient) Validate(redisURL string) error {
	files := r.CA != "" || r.Cert != "" || r.Key != "" || r.ServerName != "" || r.SkipHostnameVerification
	switch {
	case (r.On || files) && redisURL == "":
		return errors.New("--redis-tls* configure the connection to Redis, but --redis is not set (the memory store has no connection)")
	case files && !r.Enabled(redisURL):
		return errors.New("--redis-tls-* are set but TLS to Redis is off: set --redis-tls, or use a rediss:// URL")
	case (r.Cert == "") != (r.Key == ""):
		return errors.New("--redis-tls-cert and --redis-tls-key go together: give both for a client certificate, or neither")
	case r.SkipHostnameVerification && r.ServerName != "":
		return errors.New("--redis-tls-server-name names what to verify, --redis-tls-skip-hostname-verification says not to: use one")
	}
	return nil
}

// Config returns the TLS configuration of the Redis connections; nil when
// TLS is off or a rediss:// URL alone asks for it with the system's CAs.
func (r RedisClient) Config(redisURL string) (*tls.Config, error) {
	if !r.Enabled(redisURL) || !r.On && r.CA == "" && r.Cert == "" && r.ServerName == "" && !r.SkipHostnameVerification {
		return nil, nil
	}
	c, err := ClientConfig(r.ClientFiles)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			flag := map[Role]string{RoleCA: "--redis-tls-ca", RoleCert: "--redis-tls-cert", RoleKey: "--redis-tls-key"}[fe.Role]
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return nil, err
	}
	return c, nil
}
