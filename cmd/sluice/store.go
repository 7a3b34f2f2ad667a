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
// redisURL, its keys under prefix (a Redis that does not answer yet is
// connected to in the background; checks get their rules' failure modes
// meanwhile), over redisTLS when set, else the memory store with mem. ping is nil for the memory
// store; closeStore closes either.
func openStore(redisURL, prefix string, redisTLS *tls.Config, mem memory.Options, log *slog.Logger) (store sluice.Store, ping func(context.Context) error, closeStore func() error, err error) {
	if redisURL == "" {
		ms := memory.New(mem)
		return ms, nil, ms.Close, nil
	}
	rs, err := sluiceredis.Connect(redisURL, sluiceredis.Options{Prefix: prefix, TLS: redisTLS}, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open Redis: %w", err)
	}
	return rs, rs.Ping, rs.Close, nil
}
