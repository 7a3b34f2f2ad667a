package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

var envoyTestRequest = &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
	Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
}}}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func TestServeValidatesEnvoyKeyFormat(t *testing.T) {
	base := serveConfig{Addr: ":8080", StoreTimeout: time.Second, DefaultFailureMode: "closed"}
	for _, c := range []struct {
		format, prefix, redis, want string
	}{
		{"ratelimit", "", "", "set --redis too"},
		{"envoy", "", "redis://r:6379", `--envoy-key-format "envoy" is not a key format`},
		{"sluice", "rl_", "redis://r:6379", "--envoy-key-prefix applies to --envoy-key-format ratelimit only"},
		{"ratelimit", "rl_", "redis://r:6379", ""},
	} {
		cfg := base
		cfg.EnvoyKeyFormat, cfg.EnvoyKeyPrefix, cfg.Redis = c.format, c.prefix, c.redis
		err := cfg.validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: error %v, want %q", c, err, c.want)
		}
	}
}

func TestServeValidatesXDSTLS(t *testing.T) {
	base := serveConfig{Addr: ":8080", StoreTimeout: time.Second, DefaultFailureMode: "closed", EnvoyXDSServer: "xds:18000"}
	for _, c := range []struct {
		change func(*serveConfig)
		want   string
	}{
		{func(c *serveConfig) { c.EnvoyXDSTLSCA = "/ca.pem" }, "--envoy-xds-tls-* are set but --envoy-xds-tls is not"},
		{func(c *serveConfig) { c.EnvoyXDSTLS, c.EnvoyXDSServer = true, "" }, "there is no xDS server to dial"},
		{func(c *serveConfig) { c.EnvoyXDSTLS, c.EnvoyXDSTLSCert = true, "/c.pem" }, "--envoy-xds-tls-cert and --envoy-xds-tls-key go together"},
	} {
		cfg := base
		c.change(&cfg)
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
