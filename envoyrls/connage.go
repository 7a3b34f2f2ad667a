package envoyrls

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// MaxConnectionAgeOption closes each connection with a GOAWAY after age (grpc-go
// adds ±10% jitter, so a fleet's connections do not all cycle at once) and
// forcibly grace later, as envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE and
// _GRACE do: Envoy then reconnects and spreads over instances added since.
// Placed after ServerOptions, it keeps their keepalive settings. Zero age
// keeps connections for ever; zero grace lets calls in flight finish.
func MaxConnectionAgeOption(age, grace time.Duration) grpc.ServerOption {
	p := keepalive.ServerParameters{
		MaxConnectionIdle: maxConnectionIdle,
		Time:              keepaliveTime,
		Timeout:           keepaliveTimeout,
	}
	if age > 0 {
		p.MaxConnectionAge = age
	}
	if grace > 0 {
		p.MaxConnectionAgeGrace = grace
	}
	return grpc.KeepaliveParams(p)
}
