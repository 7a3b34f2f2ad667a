package middleware

import (
	"context"
	"log/slog"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// RemoteStore is the store of remote mode's engine over c, and
// WithRemoteRoute the context that gives its checks their route, so a test
// can use the store as a store.
func RemoteStore(c *client.Client) sluice.Store {
	return &remoteStore{c: c, log: slog.New(slog.DiscardHandler)}
}

func WithRemoteRoute(ctx context.Context, route string) context.Context {
	return withRemoteCall(ctx, &remoteCall{route: route})
}
