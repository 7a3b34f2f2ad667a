package tlsconfig_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
)

func TestRedisClientValidate(t *testing.T) {
	files := func(f tlsconfig.ClientFiles) tlsconfig.RedisClient {
		return tlsconfig.RedisClient{On: true, ClientFiles: f}
	}
	for _, tt := range []struct {
		name string
		r    tlsconfig.RedisClient
		url  string
		want string // "" for valid
	}{
		{"off", tlsconfig.RedisClient{}, "", ""},
		{"on_without_redis", tlsconfig.RedisClient{On: true}, "", "--redis is not set"},
		{"files_without_tls", tlsconfig.RedisClient{ClientFiles: tlsconfig.ClientFiles{CA: "/ca.pem"}}, "redis://r:6379", "TLS to Redis is off"},
		{"files_with_rediss", tlsconfig.RedisClient{ClientFiles: tlsconfig.ClientFiles{CA: "/ca.pem"}}, "rediss://r:6379", ""},
		{"cert_without_key", files(tlsconfig.ClientFiles{Cert: "/c.pem"}), "redis://r:6379", "go together"},
		{"name_and_skip", files(tlsconfig.ClientFiles{ServerName: "r", SkipHostnameVerification: true}), "redis://r:6379", "use one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.Validate(tt.url)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate(%q) = %v, want %q", tt.url, err, tt.want)
			}
		})
	}
}

func TestRedisClientConfig(t *testing.T) {
	if c, err := (tlsconfig.RedisClient{}).Config("rediss://r:6379"); c != nil || err != nil {
		t.Fatalf("a rediss:// URL alone: %v, %v; want no configuration of its own (the system's CAs)", c, err)
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "redis-ca")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	c, err := tlsconfig.RedisClient{On: true, ClientFiles: tlsconfig.ClientFiles{CA: caFile, ServerName: "redis.internal"}}.Config("redis://r:6379")
	if err != nil || c == nil || c.RootCAs == nil || c.ServerName != "redis.internal" {
		t.Fatalf("Config: %+v, %v; want the CA and the name", c, err)
	}
	_, err = tlsconfig.RedisClient{On: true, ClientFiles: tlsconfig.ClientFiles{CA: filepath.Join(dir, "nope.pem")}}.Config("redis://r:6379")
	if err == nil || !strings.HasPrefix(err.Error(), "--redis-tls-ca: ") {
		t.Fatalf("a missing CA file: %v, want an error naming --redis-tls-ca", err)
	}
}
