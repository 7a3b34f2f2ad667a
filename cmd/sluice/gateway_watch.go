package main

import (
	"context"
	"log/slog"

	"github.com/sluicelabs/sluice/gateway"
)

// watchConfigFile is gateway.WatchConfigFile, under the name gateway.go
// calls it by.
func watchConfigFile(ctx context.Context, path string, log *slog.Logger) (<-chan struct{}, error) {
	return gateway.WatchConfigFile(ctx, path, log)
}
