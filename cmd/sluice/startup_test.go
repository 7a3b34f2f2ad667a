package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestEnvoyRatelimitKeysStartWithoutRedis: with --envoy-key-format
// ratelimit, whose checks use a Redis connection of their own, the service
// still starts while Redis is down; the Envoy checks fail by policy, then are
// counted under envoyproxy/ratelimit's keys once Redis answers.
func TestEnvoyRatelimitKeysStartWithoutRedis(t *testing.T) {
	redis := testenv.Redis(t)
	redis.Stop()
	cfg := serveConfig{Addr: "127.0.0.1:0", Database: "sqlite://" + filepath.Join(t.TempDir(), "sluice.db"),
		AdminToken: "envoy-ratelimit-keys-admin-token-0123456789", EnvoyConfig: envoyTestDir(t, envoyTestConfig),
		EnvoyJSONAddr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), Redis: redis.URL(), RedisPrefix: "sluice:",
		EnvoyKeyFormat: envoyKeyFormatRatelimit, EnvoyKeyPrefix: "rl_", StoreTimeout: time.Second,
		DefaultFailureMode: "closed", ShutdownTimeout: 5 * time.Second, LogLevel: "info"}
	var output testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, cfg, &output)
	if err != nil {
		cancel()
		t.Fatalf("the service did not start with Redis down: %v", err)
	}
	defer func() { cancel(); <-svc.done }()
	jsonURL := "http://" + cfg.EnvoyJSONAddr
	if got := postJSON(t, jsonURL, envoyTestJSONBody); got == http.StatusOK || got == http.StatusTooManyRequests {
		t.Fatalf("an Envoy check before Redis answers: %d, want the failure mode's error", got)
	}

	redis.Start()
	testenv.Eventually(t, 30*time.Second, "an Envoy check decided by Redis", func() bool {
		return postJSON(t, jsonURL, envoyTestJSONBody) == http.StatusOK
	})
	// Two per hour: one more is allowed, the next denied, under the
	// ratelimit-format key.
	if got := postJSON(t, jsonURL, envoyTestJSONBody); got != http.StatusOK {
		t.Fatalf("second check: %d", got)
	}
	if got := postJSON(t, jsonURL, envoyTestJSONBody); got != http.StatusTooManyRequests {
		t.Fatalf("third check: %d, want 429", got)
	}
	keys, err := redis.Do("KEYS", "rl_api_user_u_*")
	if err != nil || keys == "" || strings.Contains(keys, "\n") {
		t.Errorf("ratelimit-format keys in Redis: %q %v, want one", keys, err)
	}
	if got, _ := redis.Do("GET", keys); got != "2" {
		t.Errorf("its count: %q, want 2", got)
	}
}
