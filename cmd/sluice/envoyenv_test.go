package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// TestEnvoyEnvTable: every mapped row of envoyrls.EnvTable names a flag of
// sluice serve (envoyrls's TestEnvTable checks the rest of the table).
func TestEnvoyEnvTable(t *testing.T) {
	flags := newServeCmd().Flags()
	for _, row := range envoyrls.EnvTable {
		if row.Kind == envoyrls.EnvMapped && flags.Lookup(row.Flag) == nil {
			t.Errorf("%v map to --%s, which sluice serve does not have", row.Vars, row.Flag)
		}
	}
}

// envOf is a lookup over a map, as os.LookupEnv over an environment.
func envOf(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

// changedFlags lists the flags fs has been given, with their values.
func changedFlags(fs *pflag.FlagSet) map[string]string {
	out := map[string]string{}
	fs.Visit(func(f *pflag.Flag) { out[f.Name] = f.Value.String() })
	return out
}

func TestEnvoyEnvSetsFlags(t *testing.T) {
	// The defaults an envoyproxy/ratelimit environment brings, as there.
	defaults := map[string]string{
		"grpc-addr": "0.0.0.0:8081", "debug-addr": "0.0.0.0:6070", "envoy-config": "/srv/runtime_data/current/config",
		"grpc-max-connection-age": "24h0m0s", "grpc-max-connection-age-grace": "1h0m0s",
		// USE_STATSD is true by default there, over gostats' default, TCP.
		"envoy-statsd-addr": "localhost:8125", "envoy-statsd-protocol": "tcp",
	}
	noStatsd := map[string]string{"envoy-statsd-addr": "", "envoy-statsd-protocol": ""}
	and := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	with := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range defaults {
			out[k] = v
		}
		for k, v := range m {
			if v == "" {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	for _, c := range []struct {
		name        string
		env         map[string]string
		want        map[string]string
		wantIgnored []string
	}{
		{"generic_names_alone_do_nothing", map[string]string{"PORT": "9000", "HOST": "127.0.0.1", "LOG_LEVEL": "debug", "LOG_FORMAT": "text"}, map[string]string{}, nil},
		{"a_deployment", map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "WARN", "LOG_FORMAT": "json", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379",
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false"},
			with(and(noStatsd, map[string]string{"log-level": "warn", "log-format": "json", "redis": "redis://redis:6379", "envoy-config": "/data/ratelimit/config", "envoy-key-format": "ratelimit"})),
			[]string{"USE_STATSD", "RUNTIME_WATCH_ROOT"}},
		{"listeners", map[string]string{"HOST": "127.0.0.1", "PORT": "9000", "GRPC_HOST": "10.0.0.1", "GRPC_PORT": "9001", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "9002",
			"GRPC_MAX_CONNECTION_AGE": "10m", "GRPC_MAX_CONNECTION_AGE_GRACE": "30s", "RUNTIME_APPDIRECTORY": "rl"},
			with(map[string]string{"addr": "127.0.0.1:9000", "grpc-addr": "10.0.0.1:9001", "debug-addr": "127.0.0.1:9002", "grpc-max-connection-age": "10m0s",
				"grpc-max-connection-age-grace": "30s", "envoy-config": "/srv/runtime_data/current/rl"}), nil},
		{"unix_socket_alone_as_there", map[string]string{"GRPC_UDS": "/run/rl.sock", "GRPC_PORT": "9001"},
			with(map[string]string{"grpc-uds": "/run/rl.sock", "grpc-addr": ""}), []string{"GRPC_PORT"}},
		{"redis_password_and_tls", map[string]string{"REDIS_URL": "r:6380", "REDIS_AUTH": "s3cret/+@", "REDIS_TLS": "true"},
			with(map[string]string{"redis": "rediss://:s3cret%2F+%40@r:6380", "redis-tls": "true", "envoy-key-format": "ratelimit"}), nil},
		{"redis_tls_files", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem",
			"REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			with(map[string]string{"redis": "redis-cluster://a:7000,b:7001", "redis-tls": "true", "redis-tls-ca": "/ca.pem", "redis-tls-cert": "/c.pem",
				"redis-tls-key": "/k.pem", "redis-tls-skip-hostname-verification": "true", "envoy-key-format": "ratelimit"}), nil},
		// As there, the files apply only with REDIS_TLS.
		{"redis_tls_files_without_tls", map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS_CACERT": "/ca.pem"},
			with(map[string]string{"redis": "redis://r:6379", "envoy-key-format": "ratelimit"}), []string{"REDIS_TLS_CACERT"}},
		// What Envoy Gateway sets on its rate limit Deployment
		// (internal/infrastructure/kubernetes/ratelimit there), with a TLS
		// Redis and Prometheus on.
		{"envoy_gateway", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
			"RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW",
			"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
			"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis-system.svc.cluster.local:6379", "REDIS_TLS": "true",
			"REDIS_TLS_CLIENT_CERT": "/redis-certs/tls.crt", "REDIS_TLS_CLIENT_KEY": "/redis-certs/tls.key",
			"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml"},
			with(map[string]string{"envoy-config": "", "envoy-ignore-dotfiles": "true", "log-level": "info", "envoy-xds-server": "envoy-gateway:18001",
				"envoy-xds-node-id": "envoy-ratelimit", "grpc-tls-cert": "/certs/tls.crt", "grpc-tls-key": "/certs/tls.key",
				"envoy-xds-tls": "true", "envoy-xds-tls-cert": "/certs/tls.crt", "envoy-xds-tls-key": "/certs/tls.key", "envoy-xds-tls-ca": "/certs/ca.crt",
				"envoy-serve-before-config": "true", "redis": "rediss://redis.redis-system.svc.cluster.local:6379", "redis-tls": "true",
				"redis-tls-cert": "/redis-certs/tls.crt", "redis-tls-key": "/redis-certs/tls.key", "envoy-key-format": "ratelimit",
				"envoy-prometheus-addr": ":19001", "envoy-prometheus-mapper": "/etc/statsd-exporter/conf.yaml",
				"envoy-statsd-addr": "", "envoy-statsd-protocol": ""}),
			[]string{"USE_STATSD", "RUNTIME_WATCH_ROOT", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY"}},
		{"stop_increment", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"},
			with(map[string]string{"envoy-stop-increment-when-over-limit": "true"}), nil},
		{"force_start", map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			with(map[string]string{"envoy-serve-before-config": "true"}), nil},
		{"redis_user_and_password", map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "app:pw"},
			with(map[string]string{"redis": "redis://app:pw@r:6379", "envoy-key-format": "ratelimit"}), nil},
		{"redis_cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001"},
			with(map[string]string{"redis": "redis-cluster://a:7000,b:7001", "envoy-key-format": "ratelimit"}), nil},
		{"redis_sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "pw"},
			with(map[string]string{"redis": "redis-sentinel://mymaster:pw@s1:26379,s2:26379", "envoy-key-format": "ratelimit"}), nil},
		{"cache_key_prefix", map[string]string{"REDIS_URL": "r:6379", "CACHE_KEY_PREFIX": "rl_"},
			with(map[string]string{"redis": "redis://r:6379", "envoy-key-format": "ratelimit", "envoy-key-prefix": "rl_"}), nil},
		{"cache_key_prefix_without_redis", map[string]string{"CACHE_KEY_PREFIX": "rl_"}, with(nil), []string{"CACHE_KEY_PREFIX"}},
		{"redis_url_of_sluice", map[string]string{"REDIS_URL": "redis://r:6379/2"}, with(map[string]string{"redis": "redis://r:6379/2", "envoy-key-format": "ratelimit"}), nil},
		{"grpc_mutual_tls", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem",
			"GRPC_CLIENT_TLS_CACERT": "/ca.pem", "GRPC_CLIENT_TLS_SAN": "envoy.internal"},
			with(map[string]string{"grpc-tls-cert": "/c.pem", "grpc-tls-key": "/k.pem", "grpc-tls-client-ca": "/ca.pem", "grpc-tls-client-san": "envoy.internal"}), nil},
		{"tls_files_without_use_tls", map[string]string{"GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem"},
			with(nil), []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY"}},
		{"log_levels_of_logrus", map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "trace"}, with(and(noStatsd, map[string]string{"log-level": "debug"})), []string{"USE_STATSD"}},
		{"statsd", map[string]string{"USE_STATSD": "true", "STATSD_HOST": "statsd", "STATSD_PORT": "9125", "STATSD_PROTOCOL": "udp",
			"EXTRA_TAGS": "cluster:east,release:v1.2", "STATS_FLUSH_INTERVAL": "2s", "NEAR_LIMIT_RATIO": "0.9"},
			with(map[string]string{"envoy-statsd-addr": "statsd:9125", "envoy-statsd-protocol": "udp", "envoy-stats-tags": "[cluster=east,release=v1.2]",
				"envoy-stats-flush-interval": "2s", "envoy-near-limit-ratio": "0.9"}), nil},
		{"stats_disabled", map[string]string{"DISABLE_STATS": "true", "STATSD_HOST": "statsd"}, with(noStatsd), []string{"DISABLE_STATS", "STATSD_HOST"}},
		// USE_STATSD, true by default, yields to USE_PROMETHEUS (where
		// envoyproxy/ratelimit refuses both).
		{"prometheus", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9102"}, with(and(noStatsd, map[string]string{"envoy-prometheus-addr": ":9102"})), nil},
		{"prometheus_everything", map[string]string{"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "/stats", "PROMETHEUS_MAPPER_YAML": "/etc/mapper.yaml",
			"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"},
			with(and(noStatsd, map[string]string{"envoy-prometheus-addr": ":9090", "envoy-prometheus-path": "/stats", "envoy-prometheus-mapper": "/etc/mapper.yaml",
				"envoy-prometheus-response-time-ms": "true"})), []string{"USE_STATSD"}},
		{"prometheus_off", map[string]string{"USE_PROMETHEUS": "false", "PROMETHEUS_ADDR": ":9102", "PROMETHEUS_MAPPER_YAML": "/m.yaml"}, with(nil),
			[]string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_MAPPER_YAML"}},
		{"xds", map[string]string{"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_NODE_ID": "rl-1", "RUNTIME_ROOT": "/data"},
			with(map[string]string{"envoy-config": "", "envoy-xds-server": "localhost:18000", "envoy-xds-node-id": "rl-1"}), []string{"RUNTIME_ROOT"}},
		{"xds_over_tls", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "xds:18000", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca.pem", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c.pem", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/k.pem", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.internal"},
			with(map[string]string{"envoy-config": "", "envoy-xds-server": "xds:18000", "envoy-xds-tls": "true", "envoy-xds-tls-ca": "/ca.pem",
				"envoy-xds-tls-cert": "/c.pem", "envoy-xds-tls-key": "/k.pem", "envoy-xds-tls-server-name": "xds.internal"}), nil},
		{"xds_node_metadata_and_headers", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=eu-1,tier=gold",
			"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:pw,x-team:rl"},
			with(map[string]string{"envoy-config": "", "envoy-xds-server": "localhost:18000", "envoy-xds-node-metadata": "[tier=gold,zone=eu-1]",
				"envoy-xds-headers": "[x-team=rl,x-token=pw]"}), nil},
		{"xds_server_without_xds", map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "xds:18000"}, with(nil), []string{"CONFIG_GRPC_XDS_SERVER_URL"}},
		{"response_headers", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, with(map[string]string{"envoy-response-headers": "true"}), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := newServeCmd().Flags()
			report, err := applyEnvoyEnv(fs, envOf(c.env))
			if err != nil {
				t.Fatal(err)
			}
			got := changedFlags(fs)
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("--%s = %q, want %q", k, got[k], v)
				}
			}
			for k, v := range got {
				if _, ok := c.want[k]; !ok {
					t.Errorf("--%s = %q, want it left alone", k, v)
				}
			}
			if u := got["redis"]; u != "" {
				if _, err := sluiceredis.ParseURL(u); err != nil {
					t.Errorf("the Redis URL made does not parse: %v", err)
				}
			}
			var ignored []string
			for _, i := range report.Ignored {
				v, _, _ := strings.Cut(i, ":")
				ignored = append(ignored, v)
			}
			slices.Sort(ignored)
			slices.Sort(c.wantIgnored)
			if strings.Join(ignored, ",") != strings.Join(c.wantIgnored, ",") {
				t.Errorf("reported ignored %v, want %v", ignored, c.wantIgnored)
			}
			if s := fmt.Sprint(report); strings.Contains(s, "s3cret") || strings.Contains(s, "pw") {
				t.Errorf("the report holds a secret: %s", s)
			}
		})
	}
}

// TestEnvoyEnvFlagsWin: a flag given on the command line (or as SLUICE_*,
// which counts as given) keeps its value, and the report says which
// variables it overrode.
func TestEnvoyEnvFlagsWin(t *testing.T) {
	fs := newServeCmd().Flags()
	if err := fs.Set("grpc-addr", "127.0.0.1:7000"); err != nil {
		t.Fatal(err)
	}
	report, err := applyEnvoyEnv(fs, envOf(map[string]string{"GRPC_PORT": "9001", "REDIS_URL": "r:6379"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("grpc-addr").Value.String(); got != "127.0.0.1:7000" {
		t.Fatalf("--grpc-addr %q, want the flag's 127.0.0.1:7000", got)
	}
	if strings.Join(report.Overridden, ",") != "GRPC_PORT" {
		t.Fatalf("overridden %v, want [GRPC_PORT]", report.Overridden)
	}
	if got := fs.Lookup("envoy-key-format").Value.String(); got != "ratelimit" {
		t.Fatalf("--envoy-key-format %q with REDIS_URL, want ratelimit", got)
	}
	if got := fs.Lookup("redis").Value.String(); got != "redis://r:6379" {
		t.Fatalf("--redis %q: the other variables still apply", got)
	}
}

// TestEnvoyEnvNamesWhatItDoesNotDo: variables set but not acted on are named
// in the report's one warning.
func TestEnvoyEnvNamesWhatItDoesNotDo(t *testing.T) {
	report, err := applyEnvoyEnv(newServeCmd().Flags(), envOf(map[string]string{"QUOTA_MODE": "true", "MEMCACHE_HOST_PORT": "m:11211", "TRACING_ENABLED": "true", "REDIS_POOL_SIZE": "20"}))
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	l, _ := newFormatLogger(&logs, "info", "json")
	report.Log(l)
	out := logs.String()
	for _, v := range []string{"QUOTA_MODE", "MEMCACHE_HOST_PORT", "TRACING_ENABLED", "REDIS_POOL_SIZE", "REDIS_URL is not set"} {
		if !strings.Contains(out, v) {
			t.Errorf("the startup log does not name %s:\n%s", v, out)
		}
	}
	if n := strings.Count(out, "not acted on"); n != 1 {
		t.Errorf("%d warnings of variables not acted on, want one:\n%s", n, out)
	}
}

// TestEnvoyEnvRefusesBadValues: a value Sluice cannot honour stops the start
// with a sentence naming the variable, and sets no flag.
func TestEnvoyEnvRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"USE_STATSD": "false", "PORT": "http"}, `PORT="http" is not a port number`},
		{map[string]string{"GRPC_PORT": "70000"}, `GRPC_PORT="70000" is not a port number`},
		{map[string]string{"USE_STATSD": "false", "LOG_LEVEL": "loud"}, `LOG_LEVEL="loud" is not a log level`},
		{map[string]string{"USE_STATSD": "false", "LOG_FORMAT": "xml"}, `LOG_FORMAT="xml" is not a log format`},
		{map[string]string{"REDIS_URL": "/var/run/nutcracker/ratelimit.sock"}, "is not host:port (Sluice reaches Redis over TCP only)"},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/r.sock"}, `REDIS_SOCKET_TYPE="unix" is not implemented`},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TYPE": "ring"}, `REDIS_TYPE="ring" is not a Redis type`},
		{map[string]string{"REDIS_URL": "a:1,b:2"}, "REDIS_TYPE is single"},
		{map[string]string{"REDIS_URL": "mymaster", "REDIS_TYPE": "sentinel"}, "needs the master set name, then the sentinels"},
		{map[string]string{"REDIS_URL": "r:6379", "REDIS_TLS": "yes please"}, `REDIS_TLS="yes please" is not a boolean`},
		{map[string]string{"BACKEND_TYPE": "memcache"}, `BACKEND_TYPE="memcache" is not implemented`},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, `CONFIG_TYPE="CONSUL" is not a configuration type`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, `GRPC_MAX_CONNECTION_AGE="forever" is not a valid value for --grpc-max-connection-age`},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "sure"}, `LIMIT_RESPONSE_HEADERS_ENABLED="sure" is not a valid value`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token=s3cret"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: entry 1 is not key:value"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone"}, "CONFIG_GRPC_XDS_NODE_METADATA is not a valid value for --envoy-xds-node-metadata"},
		{map[string]string{"STATSD_PORT": "statsd"}, `STATSD_PORT="statsd" is not a port number`},
		{map[string]string{"STATSD_PORT": "0"}, `STATSD_PORT="0" is not a port number`},
		{map[string]string{"STATSD_PROTOCOL": "sctp"}, `STATSD_PROTOCOL="sctp" is not tcp or udp`},
		{map[string]string{"USE_STATSD": "true", "USE_PROMETHEUS": "true"}, "USE_STATSD and USE_PROMETHEUS are both true"},
		{map[string]string{"DISABLE_STATS": "maybe"}, `DISABLE_STATS="maybe" is not a boolean`},
		{map[string]string{"EXTRA_TAGS": "cluster=east"}, `EXTRA_TAGS="cluster=east" is not key:value pairs`},
		{map[string]string{"NEAR_LIMIT_RATIO": "most"}, `NEAR_LIMIT_RATIO="most" is not a valid value for --envoy-near-limit-ratio`},
		{map[string]string{"STATS_FLUSH_INTERVAL": "often"}, `STATS_FLUSH_INTERVAL="often" is not a valid value for --envoy-stats-flush-interval`},
	} {
		t.Run(c.want, func(t *testing.T) {
			fs := newServeCmd().Flags()
			_, err := applyEnvoyEnv(fs, envOf(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error shows a header value: %v", err)
			}
			if got := changedFlags(fs); len(got) != 0 {
				t.Fatalf("flags set despite the error: %v", got)
			}
		})
	}
}

// buildSluice builds the sluice binary into a temporary directory.
func buildSluice(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH, so the binary cannot be built: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestServeStartsFromEnvoyRatelimitEnvironment runs the built binary as a
// Deployment written for envoyproxy/ratelimit would, with only its
// variables (and a generous SLUICE_STORE_TIMEOUT), and talks to it as Envoy and its probes do:
// gRPC health and ShouldRateLimit, counters in the given Redis, GET
// /healthcheck on PORT and /rlconfig on DEBUG_PORT.
func TestServeStartsFromEnvoyRatelimitEnvironment(t *testing.T) {
	redis := testenv.Redis(t)
	bin := buildSluice(t)
	root := t.TempDir()
	configDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(configDir, "api.yaml"), []byte(`domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	port, grpcPort, debugPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	cmd := exec.Command(bin, "serve")
	cmd.Dir = t.TempDir() // the default SQLite catalog lands here
	cmd.Env = []string{
		"USE_STATSD=false",
		"LOG_LEVEL=WARN",
		"LOG_FORMAT=text",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redis.Addr,
		"RUNTIME_ROOT=" + root,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1",
		fmt.Sprintf("PORT=%d", port),
		"GRPC_HOST=127.0.0.1",
		fmt.Sprintf("GRPC_PORT=%d", grpcPort),
		"DEBUG_HOST=127.0.0.1",
		fmt.Sprintf("DEBUG_PORT=%d", debugPort),
		// Sluice's own per-call deadline (50ms) is not what is tested: on a
		// loaded test machine the first script load can take longer.
		"SLUICE_STORE_TIMEOUT=10s",
	}
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Poll health until SERVING: the process is compiling nothing, but
	// opens a catalog and Redis first. The deadline is generous; it is not
	// what is tested.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && h.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup, which waits for it
			t.Fatalf("sluice serve exited (%v):\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC health not SERVING within 30s (%v, %v):\n%s", h, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := rlspb.NewRateLimitServiceClient(conn)
	for _, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(ctx, envoyTestRequest)
		if err != nil || resp.OverallCode != want {
			t.Fatalf("ShouldRateLimit: %v, %v; want %v", resp, err, want)
		}
	}
	// The counter is in REDIS_URL's Redis, under envoyproxy/ratelimit's own
	// key (no CACHE_KEY_PREFIX), so both services share it.
	if keys, err := redis.Do("KEYS", "api_user_u_*"); err != nil || strings.Count(keys, "api_user_u_") != 1 {
		t.Fatalf("Redis KEYS api_user_u_*: %q, %v; want envoyproxy/ratelimit's key of the counter", keys, err)
	}
	if code, body := getHealth(t, fmt.Sprintf("http://127.0.0.1:%d", port)); code != 200 || body != "OK" {
		t.Fatalf("GET /healthcheck on PORT: %d %q, want 200 OK", code, body)
	}
	if got := getText(t, fmt.Sprintf("http://127.0.0.1:%d/rlconfig", debugPort)); got != "api.user: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false\n" {
		t.Fatalf("/rlconfig on DEBUG_PORT: %q", got)
	}
	// LOG_LEVEL=WARN and LOG_FORMAT=text: warnings only, as text; the one
	// warning names the variables not acted on.
	logs := stderr.String()
	for _, want := range []string{"level=WARN", "USE_STATSD", "RUNTIME_WATCH_ROOT"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log has no %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "level=INFO") || strings.Contains(logs, `"level":`) {
		t.Errorf("the log is not LOG_LEVEL=WARN as text:\n%s", logs)
	}
}
