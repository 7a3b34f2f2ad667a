package main

import (
	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
)

// addRedisTLSFlags declares serve's TLS settings of its Redis connections,
// named after envoyproxy/ratelimit's REDIS_TLS_* variables.
func addRedisTLSFlags(f *pflag.FlagSet, r *tlsconfig.RedisClient) {
	f.BoolVar(&r.On, "redis-tls", false, "TLS on every connection to --redis, whatever its scheme (rediss:// turns it on too); with --redis-tls-* for a private CA or a client certificate (REDIS_TLS)")
	f.StringVar(&r.CA, "redis-tls-ca", "", "PEM CA certificates Redis' certificate must chain to (default: the system's; REDIS_TLS_CACERT)")
	f.StringVar(&r.Cert, "redis-tls-cert", "", "PEM client certificate presented to Redis, for tls-auth-clients (REDIS_TLS_CLIENT_CERT)")
	f.StringVar(&r.Key, "redis-tls-key", "", "PEM private key of --redis-tls-cert (REDIS_TLS_CLIENT_KEY)")
	f.StringVar(&r.ServerName, "redis-tls-server-name", "", "name Redis' certificate must carry (default: the host dialled)")
	f.BoolVar(&r.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "verify Redis' certificate chain but not its name, for nodes reached by addresses their certificates do not carry (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)")
}
