package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// openStore opens the rate-limit store of serve and gateway: Redis at
// redisURL with opts (a Redis that does not answer yet is connected to in
// the background; checks get their rules' failure modes meanwhile), else
// the memory store with mem. ping is nil for the memory store; closeStore
// closes either.
func openStore(redisURL string, opts sluiceredis.Options, mem memory.Options, log *slog.Logger) (store sluice.Store, ping func(context.Context) error, closeStore func() error, err error) {
	if redisURL == "" {
		if opts.ReplicaAcks != 0 {
			return nil, nil, nil, fmt.Errorf("--redis-replica-acks %d needs --redis: the in-process memory store has no replicas", opts.ReplicaAcks)
		}
		ms := memory.New(mem)
		return ms, nil, ms.Close, nil
	}
	rs, err := sluiceredis.Connect(redisURL, opts, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open Redis: %w", err)
	}
	return rs, rs.Ping, rs.Close, nil
}

// redisOptions are the Redis store's options of serve: a write waits for
// its replicas no longer than a store call may take.
func (cfg serveConfig) redisOptions(redisTLS *tls.Config) sluiceredis.Options {
	return sluiceredis.Options{Prefix: cfg.RedisPrefix, TLS: redisTLS, ReplicaAcks: cfg.RedisReplicaAcks, ReplicaAckTimeout: cfg.StoreTimeout}
}
