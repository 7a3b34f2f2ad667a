package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// redisTLSFlags are serve's TLS settings of its Redis connections: a
// private CA, a client certificate (Redis' tls-auth-clients), the name to
// check, as envoyproxy/ratelimit's REDIS_TLS_* variables give them.
type redisTLSFlags struct {
	On                       bool
	CA, Cert, Key, Name      string
	SkipHostnameVerification bool
}

func addRedisTLSFlags(f *pflag.FlagSet, r *redisTLSFlags) {
	f.BoolVar(&r.On, "redis-tls", false, "TLS on every connection to --redis, whatever its scheme (rediss:// turns it on too); with --redis-tls-* for a private CA or a client certificate (REDIS_TLS)")
	f.StringVar(&r.CA, "redis-tls-ca", "", "PEM CA certificates Redis' certificate must chain to (default: the system's; REDIS_TLS_CACERT)")
	f.StringVar(&r.Cert, "redis-tls-cert", "", "PEM client certificate presented to Redis, for tls-auth-clients (REDIS_TLS_CLIENT_CERT)")
	f.StringVar(&r.Key, "redis-tls-key", "", "PEM private key of --redis-tls-cert (REDIS_TLS_CLIENT_KEY)")
	f.StringVar(&r.Name, "redis-tls-server-name", "", "name Redis' certificate must carry (default: the host dialled)")
	f.BoolVar(&r.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "verify Redis' certificate chain but not its name, for nodes reached by addresses their certificates do not carry (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
}

// enabled reports whether TLS is on: by flag, or by a rediss:// URL.
func (r redisTLSFlags) enabled(redisURL string) bool {
	return r.On || strings.HasPrefix(redisURL, "rediss://")
}

// validate checks the flags before any file is read.
func (r redisTLSFlags) validate(redisURL string) error {
	files := r.CA != "" || r.Cert != "" || r.Key != "" || r.Name != "" || r.SkipHostnameVerification
	switch {
	case (r.On || files) && redisURL == "":
		return errors.New("--redis-tls* configure the connection to Redis, but --redis is not set (the memory store has no connection)")
	case files && !r.enabled(redisURL):
		return errors.New("--redis-tls-* are set but TLS to Redis is off: set --redis-tls, or use a rediss:// URL")
	case (r.Cert == "") != (r.Key == ""):
		return errors.New("--redis-tls-cert and --redis-tls-key go together: give both for a client certificate, or neither")
	case r.SkipHostnameVerification && r.Name != "":
		return errors.New("--redis-tls-server-name names what to verify, --redis-tls-skip-hostname-verification says not to: use one")
	}
	return nil
}

// config returns the TLS configuration of the Redis connections; nil when
// TLS is off or a rediss:// URL alone asks for it with the system's CAs.
func (r redisTLSFlags) config(redisURL string) (*tls.Config, error) {
	if !r.enabled(redisURL) || !r.On && r.CA == "" && r.Cert == "" && r.Name == "" && !r.SkipHostnameVerification {
		return nil, nil
	}
	c, err := tlsconfig.ClientConfig(tlsconfig.ClientFiles{CA: r.CA, Cert: r.Cert, Key: r.Key, ServerName: r.Name,
		SkipHostnameVerification: r.SkipHostnameVerification})
	if err != nil {
		var fe *tlsconfig.FileError
		if errors.As(err, &fe) {
			flag := map[tlsconfig.Role]string{tlsconfig.RoleCA: "--redis-tls-ca", tlsconfig.RoleCert: "--redis-tls-cert", tlsconfig.RoleKey: "--redis-tls-key"}[fe.Role]
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return nil, err
	}
	return c, nil
}
