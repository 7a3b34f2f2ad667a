package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/catalogdb"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/usage"
)

// serveConfig is everything sluice serve is configured with.
type serveConfig struct {
	Addr        string
	GRPCAddr    string
	Redis       string
	RedisPrefix string
	// RedisReplicaAcks is the replicas every write waits for (WAIT).
	RedisReplicaAcks int
	// RedisTLS is the TLS of the Redis connections (redistls.go).
	RedisTLS   tlsconfig.RedisClient
	Database   string
	AdminToken string
	// AdminTokenFile holds the operator token, so it is not in the
	// process's command line or environment.
	AdminTokenFile string
	EnvoyConfig    string
	// EnvoyJSONAddr is the listener of Envoy's unauthenticated JSON form.
	EnvoyJSONAddr string
	// EnvoyResponseHeaders adds rate-limit headers to Envoy's answers.
	EnvoyResponseHeaders bool
	StoreTimeout         time.Duration
	DefaultFailureMode   string
	PprofAddr            string
	ShutdownTimeout      time.Duration
	LogLevel             string
	MaxInFlight          int
	MaxInFlightPerTenant int
	// LeaseHotRate, LeaseTTL and LeaseMaxUnits tune quota leasing of rules
	// whose limits say lease auto (see check.Options).
	LeaseHotRate    int
	LeaseTTL        time.Duration
	LeaseMaxUnits   int64
	MaxWait         time.Duration
	MaxMetricSeries int
	// MemoryMaxKeys and MemoryMaxKeysPerTenant bound the embedded memory
	// store (see memory.Options).
	MemoryMaxKeys          int
	MemoryMaxKeysPerTenant int
	// AdminTimeout bounds each admin call; the caps bound a tenant's rules
	// and keys (see httpapi.Options).
	AdminTimeout      time.Duration
	MaxRulesPerTenant int
	MaxKeysPerTenant  int
	// MaxOverridesPerTenant caps a tenant's overrides, across its rules.
	MaxOverridesPerTenant int
	// DrainPeriod is how long, on SIGTERM, /readyz answers 503 while every
	// request is still served, so load balancers stop sending first.
	DrainPeriod time.Duration
	// MetricsAddr, if set, serves /metrics on its own listener instead of
	// the public one.
	MetricsAddr string
	// TLSCert, TLSKey and TLSClientCA put every HTTP listener behind TLS
	// (mutual with a client CA); the GRPC ones do the same for --grpc-addr.
	TLSCert, TLSKey, TLSClientCA             string
	GRPCTLSCert, GRPCTLSKey, GRPCTLSClientCA string

	// Envoy holds envoyproxy/ratelimit's behaviours, each a flag
	// (--envoy-merge-domains...).
	Envoy envoyFlags
	// GRPCTLSClientSAN, if set, is a name every gRPC client certificate
	// must carry (GRPC_CLIENT_TLS_SAN).
	GRPCTLSClientSAN string
	// GRPCUDS serves the Envoy gRPC service on a unix socket too.
	GRPCUDS string
	// GRPCMaxConnectionAge and its grace close gRPC connections after a
	// while, so clients rebalance over new instances (0: never).
	GRPCMaxConnectionAge, GRPCMaxConnectionAgeGrace time.Duration
	// DebugAddr serves /rlconfig, the loaded Envoy configuration as text.
	DebugAddr string
	// LogFormat is json or text.
	LogFormat string
	// EnvoyXDSServer, instead of EnvoyConfig, takes the Envoy configuration
	// from an xDS management server.
	EnvoyXDSServer        string
	EnvoyXDSNodeID        string
	EnvoyXDSRetryInterval time.Duration
	// EnvoyXDSNodeMetadata and EnvoyXDSHeaders go to the xDS server: the
	// node's metadata, and gRPC metadata on the stream.
	EnvoyXDSNodeMetadata, EnvoyXDSHeaders map[string]string
	// EnvoyXDSTLS dials the xDS server over TLS: CA (default: the system's),
	// client certificate and key (mutual TLS), and the name to verify.
	EnvoyXDSTLS                                                     bool
	EnvoyXDSTLSCA, EnvoyXDSTLSCert, EnvoyXDSTLSKey, EnvoyXDSTLSName string
	// EnvoyMode runs as envoyproxy/ratelimit (envmode.go): the Envoy
	// service alone, ENV's HTTP port on Addr, nothing written to disk.
	EnvoyMode bool
	// EnvoyStopIncrement is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	EnvoyStopIncrement bool
	// EnvoyServeBeforeConfig reports the Envoy service SERVING before its
	// first configuration (FORCE_START_WITHOUT_INITIAL_CONFIG).
	EnvoyServeBeforeConfig bool
	// EnvoyCounting is how Envoy domains' hits count unless their YAML
	// says: strict or envoy (envoyrls.Counting).
	EnvoyCounting string
	// EnvoyKeyFormat is sluice or ratelimit (envoyproxy/ratelimit's Redis
	// keys for default fixed windows, under EnvoyKeyPrefix).
	EnvoyKeyFormat, EnvoyKeyPrefix string
	// EnvoyStats sends envoyproxy/ratelimit's stats, under its names, to
	// statsd and as its Prometheus series (--envoy-statsd-addr...).
	EnvoyStats envoyrls.EnvStatsOptions
	// envoyEnv is what envoyproxy/ratelimit's environment variables set,
	// logged once the logger exists.
	envoyEnv envoyrls.EnvReport
	// Console serves the web console, on ConsoleAddr if set (console.go).
	Console     bool
	ConsoleAddr string
	// AdminWriteLimit limits tenants' admin writes (CAPACITY:RATE/UNIT or off).
	AdminWriteLimit string
	// AuditRetention is how long audit entries are kept (a period or off).
	AuditRetention string
	// UsageRetention is how long usage rollups are kept (a period or off).
	UsageRetention string
	// UsageFlush is how often per-minute usage rollups are written to the
	// catalog database (0: no rollups).
	UsageFlush time.Duration
	// ConsoleSignInFailures limits failed sign-ins per client address
	// (LIMIT/WINDOW); TrustedProxies may report that address.
	ConsoleSignInFailures string
	TrustedProxies        []string
	// AdminTokenOrigin says where AdminToken came from: "flag" (also when
	// empty) or "env"; for the start log.
	AdminTokenOrigin string
	// AccessLog logs each request as a JSON record; AccessLogSample is the
	// fraction of allowed checks kept.
	AccessLog       bool
	AccessLogSample float64
	// wrapStore, when set, wraps the rate-limit store before the engine
	// gets it: tests see through it when a check reaches the store.
	wrapStore func(sluice.Store) sluice.Store
}

func init() { rootCmd.AddCommand(newServeCmd()) }

func newServeCmd() *cobra.Command {
	var cfg serveConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the rate-limit service (HTTP check and admin API)",
		Long: `Run the rate-limit service: POST /v1/check, the admin API, /healthz,
/readyz and /metrics on --addr.

With no flags it runs on an in-process memory store and a SQLite catalog in
./sluice.db, and prints a generated admin token once. In production, give
--redis and --database postgres://... and run as many instances as needed.
With --tls-cert and --tls-key the HTTP listeners serve HTTPS (mutual TLS with
--tls-client-ca); --grpc-tls-* do the same for --grpc-addr (docs/service.md).

Every flag can also be set as SLUICE_<FLAG> (e.g. SLUICE_ADMIN_TOKEN).
envoyproxy/ratelimit's own variables (RUNTIME_ROOT, REDIS_URL, GRPC_PORT,
...) are read too, below SLUICE_* and flags, so its Deployments run unchanged
(docs/envoy.md, "Migrating from envoyproxy/ratelimit").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			apply := func() (envoyrls.EnvReport, error) { return applyEnvoyEnv(cmd.Flags(), os.LookupEnv) }
			if cfg.EnvoyMode {
				apply = func() (envoyrls.EnvReport, error) { return applyEnvoyMode(cmd, &cfg) }
			}
			report, err := apply()
			if err != nil {
				return err
			}
			cfg.envoyEnv = report
			cfg.AdminTokenOrigin = flagOrigin(cmd, "admin-token")
			return runServe(cmd.Context(), cfg, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", ":8080", "HTTP listener for the check and admin API, health and metrics")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", "", "Envoy RateLimitService gRPC listener (off when empty)")
	f.StringVar(&cfg.Redis, "redis", "", "Redis URL: redis://h:6379/0, redis-cluster://h1:p,h2:p or redis-sentinel://master@h:26379 (default: in-process memory store)")
	f.StringVar(&cfg.RedisPrefix, "redis-prefix", "sluice:", "prefix of every Redis key, so several deployments can share one Redis")
	f.IntVar(&cfg.RedisReplicaAcks, "redis-replica-acks", 0, "replicas that must have every write of a check (Redis WAIT, in the same round trip, for at most --store-timeout) before it is allowed; fewer is a store failure answered by the rule's failure mode, so a failover loses no admitted unit (0: asynchronous replication, as Redis does by default)")
	f.StringVar(&cfg.Database, "database", catalogdb.Default, "catalog database: postgres://... or sqlite://path")
	f.StringVar(&cfg.AdminToken, "admin-token", "", "operator token for the admin API (default: one is generated, stored hashed, and printed once); prefer --admin-token-file, a flag value is visible to other local users")
	f.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the operator token (a mounted secret), read at start; when it does not exist and the catalog holds no token yet, the generated token is written there (mode 0600) and shown nowhere else")
	f.StringVar(&cfg.EnvoyConfig, "envoy-config", "", "directory of envoyproxy/ratelimit YAML files for the gRPC service")
	f.StringVar(&cfg.EnvoyJSONAddr, "envoy-json-addr", "", "listener of its own for POST /json, the Envoy rate-limit service's unauthenticated JSON form, e.g. 127.0.0.1:8082 (off when empty; never on --addr)")
	f.BoolVar(&cfg.EnvoyResponseHeaders, "envoy-response-headers", false, "add rate-limit headers to the Envoy rate-limit service's answers, named by --envoy-header-style (LIMIT_RESPONSE_HEADERS_ENABLED)")
	f.BoolVar(&cfg.Envoy.MergeDomains, "envoy-merge-domains", false, "let several --envoy-config files define one domain, their top-level descriptors together (MERGE_DOMAIN_CONFIG)")
	f.BoolVar(&cfg.Envoy.IgnoreDotfiles, "envoy-ignore-dotfiles", false, "skip files and directories under --envoy-config whose names start with a dot (RUNTIME_IGNOREDOTFILES)")
	f.StringVar(&cfg.Envoy.HeaderStyle, "envoy-header-style", string(envoyrls.HeaderStyleEnvoy), "headers of --envoy-response-headers: envoy (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, as envoyproxy/ratelimit) or ietf (Sluice's HTTP API headers)")
	f.StringVar(&cfg.Envoy.HeaderLimit, "envoy-header-limit", "RateLimit-Limit", "name of the limit header of --envoy-header-style envoy (LIMIT_LIMIT_HEADER)")
	f.StringVar(&cfg.Envoy.HeaderRemaining, "envoy-header-remaining", "RateLimit-Remaining", "name of the remaining header of --envoy-header-style envoy (LIMIT_REMAINING_HEADER)")
	f.StringVar(&cfg.Envoy.HeaderReset, "envoy-header-reset", "RateLimit-Reset", "name of the reset header (seconds) of --envoy-header-style envoy (LIMIT_RESET_HEADER)")
	f.BoolVar(&cfg.Envoy.Shadow, "envoy-shadow", false, "answer Envoy OK whatever the limits say, counting what would have been denied as shadow_denied (SHADOW_MODE)")
	f.BoolVar(&cfg.Envoy.DynamicMetadata, "envoy-dynamic-metadata", false, "return the domain, descriptors and matched rules' metadata as Envoy dynamic metadata (RESPONSE_DYNAMIC_METADATA)")
	f.DurationVar(&cfg.StoreTimeout, "store-timeout", guard.DefaultTimeout, "how long a check waits with no answer from the store before the store is sent a liveness probe, and how long it then has to answer anything before it is judged unresponsive (checks fail by their failure mode); counted in this process's running time")
	f.DurationVar(&cfg.MaxWait, "max-wait", guard.DefaultMaxWait, "longest a check waits for the store on the wall clock, queued or in flight, before it is shed (503 overloaded, gRPC RESOURCE_EXHAUSTED); raised to twice --store-timeout if shorter")
	f.StringVar(&cfg.DefaultFailureMode, "default-failure-mode", string(sluice.FailClosed), "failure mode of rules that set none: closed, open or local")
	f.StringVar(&cfg.PprofAddr, "pprof-addr", "", "listener for net/http/pprof, e.g. 127.0.0.1:6060 (off when empty)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to let in-flight requests finish on SIGTERM")
	f.StringVar(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&cfg.DrainPeriod, "drain-period", 5*time.Second, "on SIGTERM, how long /readyz answers 503 while requests are still served, before the listeners close")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "listener for /metrics alone, e.g. 127.0.0.1:9090 (default: /metrics on --addr)")
	f.IntVar(&cfg.MemoryMaxKeys, "memory-max-keys", memory.DefaultMaxKeys, "memory store (no --redis): most counters held (each lease set and hold record counts as one); a check that needs one more gets its rule's failure mode")
	f.IntVar(&cfg.MemoryMaxKeysPerTenant, "memory-max-keys-per-tenant", 0, "memory store: most counters (lease sets and hold records included) of one tenant, so a flood of subjects cannot crowd out the others (default --memory-max-keys/10)")
	f.DurationVar(&cfg.AdminTimeout, "admin-timeout", httpapi.DefaultAdminTimeout, "deadline of each admin call; past it, or with the catalog unreachable, the call answers 503 catalog_unavailable")
	f.StringVar(&cfg.UsageRetention, "usage-retention", defaultUsageRetention, "how long usage rollups are kept, e.g. 30d; older minutes are deleted in the background, in small batches (off: keep every minute)")
	f.DurationVar(&cfg.UsageFlush, "usage-flush", time.Minute, "how often each instance writes its per-minute usage rollups (decisions per tenant, rule and minute) to the catalog database, in one transaction (0: keep no rollups)")
	f.StringVar(&cfg.AuditRetention, "audit-retention", defaultAuditRetention, "how long audit log entries are kept, e.g. 180d or 52w; older ones are deleted in the background, in small batches (off: keep every entry)")
	f.StringVar(&cfg.AdminWriteLimit, "admin-write-limit", "200:50/s", "admin calls that change something (all but GET) one tenant's admin keys may make, as a token bucket CAPACITY:RATE/UNIT, checked by the rate-limit store; past it they answer 429 rate_limited (the operator token is never limited; off: no limit)")
	f.IntVar(&cfg.MaxRulesPerTenant, "max-rules-per-tenant", sluice.DefaultMaxRulesPerTenant, "most rules one tenant may have (negative: no cap)")
	f.IntVar(&cfg.MaxKeysPerTenant, "max-keys-per-tenant", sluice.DefaultMaxKeysPerTenant, "most unrevoked API keys one tenant may have (negative: no cap)")
	f.IntVar(&cfg.MaxOverridesPerTenant, "max-overrides-per-tenant", sluice.DefaultMaxOverridesPerTenant, "most per-subject overrides one tenant may have, across its rules (negative: no cap)")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", check.DefaultMaxInFlight, "checks waiting for the store at once past which new ones are shed (503 overloaded, gRPC RESOURCE_EXHAUSTED)")
	f.IntVar(&cfg.MaxInFlightPerTenant, "max-in-flight-per-tenant", 0, "checks one tenant or Envoy domain may have waiting for the store at once, past which its new ones are shed, so one tenant cannot fill the queue (0: three quarters of --max-in-flight)")
	f.IntVar(&cfg.LeaseHotRate, "lease-hot-rate", check.DefaultLeaseHotRate, "checks per second of one rule and subject at this instance from which it is served from a quota lease, and below which it is checked directly again, for rules whose every limit says lease auto (negative: never lease)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", check.DefaultLeaseTTL, "life of this instance's quota leases; each is sized to the demand seen over it, and a killed instance's unused leased units are lost until its window or bucket recovers them")
	f.Int64Var(&cfg.LeaseMaxUnits, "lease-max-units", check.DefaultMaxLeaseUnits, "most units one quota lease of this instance asks for: what a kill -9 can lose of one key at most")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate (then intermediates) of every HTTP listener: --addr, --metrics-addr, --envoy-json-addr, --pprof-addr (plain HTTP when empty); reloaded when the file changes")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "PEM CA certificates: the HTTP listeners then require a client certificate signed by one of them (mutual TLS)")
	f.StringVar(&cfg.GRPCTLSCert, "grpc-tls-cert", "", "PEM certificate of --grpc-addr (plaintext gRPC when empty; like envoyproxy/ratelimit's GRPC_SERVER_TLS_CERT)")
	f.StringVar(&cfg.GRPCTLSKey, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert (GRPC_SERVER_TLS_KEY)")
	f.StringVar(&cfg.GRPCTLSClientCA, "grpc-tls-client-ca", "", "PEM CA certificates: gRPC clients must then present a certificate signed by one of them (mutual TLS; GRPC_CLIENT_TLS_CACERT)")
	f.StringVar(&cfg.GRPCTLSClientSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: a DNS name every client certificate must carry (GRPC_CLIENT_TLS_SAN)")
	f.StringVar(&cfg.GRPCUDS, "grpc-uds", "", "unix socket path to serve the Envoy gRPC service on, alone or beside --grpc-addr (GRPC_UDS)")
	f.DurationVar(&cfg.GRPCMaxConnectionAge, "grpc-max-connection-age", 0, "close a gRPC connection (GOAWAY) after this long, so Envoy rebalances over new instances (0: never; GRPC_MAX_CONNECTION_AGE)")
	f.DurationVar(&cfg.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", 0, "after --grpc-max-connection-age, how long calls in flight may finish before the connection is closed (0: no limit; GRPC_MAX_CONNECTION_AGE_GRACE)")
	f.StringVar(&cfg.DebugAddr, "debug-addr", "", "debug listener serving /rlconfig, the loaded Envoy configuration as text, e.g. 127.0.0.1:6070 (off when empty; DEBUG_HOST/DEBUG_PORT)")
	f.StringVar(&cfg.LogFormat, "log-format", "json", "log format: json or text")
	f.BoolVar(&cfg.EnvoyMode, "envoy-mode", false, "run as envoyproxy/ratelimit: its variables with its defaults, the Envoy service alone, --addr serving only GET /healthcheck and POST /json, no catalog database and nothing written to disk (the binary run as /bin/ratelimit does this)")
	f.BoolVar(&cfg.EnvoyStopIncrement, "envoy-stop-increment-when-over-limit", false, "with counting envoy: a request that would take one descriptor past its limit is counted only in the descriptors it takes past theirs, the others only look (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; a look at each before the count, as there)")
	f.BoolVar(&cfg.EnvoyServeBeforeConfig, "envoy-serve-before-config", false, "report the Envoy service healthy (SERVING) before its first configuration arrives from --envoy-xds-server, so probes pass and Envoy's failure_mode_deny decides the calls answered UNAVAILABLE meanwhile (FORCE_START_WITHOUT_INITIAL_CONFIG)")
	f.StringVar(&cfg.EnvoyCounting, "envoy-counting", string(envoyrls.CountingStrict), "how Envoy domains' hits count unless their YAML's counting says: strict (a denied request consumes nothing) or envoy (every hit counts, past the limit too, as envoyproxy/ratelimit; the default of --envoy-mode)")
	f.StringVar(&cfg.EnvoyKeyFormat, "envoy-key-format", "sluice", "Redis keys of the Envoy service's default fixed windows: sluice, or ratelimit to share counters with envoyproxy/ratelimit on the same Redis during a migration (needs --redis)")
	f.StringVar(&cfg.EnvoyKeyPrefix, "envoy-key-prefix", "", "with --envoy-key-format ratelimit: envoyproxy/ratelimit's CACHE_KEY_PREFIX")
	f.StringVar(&cfg.EnvoyXDSServer, "envoy-xds-server", "", "host:port of an xDS management server to take the Envoy rate-limit configuration from (RateLimitConfig resources), instead of --envoy-config (CONFIG_TYPE=GRPC_XDS_SOTW)")
	f.StringVar(&cfg.EnvoyXDSNodeID, "envoy-xds-node-id", "default", "node ID presented to --envoy-xds-server, which keys its snapshots by it (CONFIG_GRPC_XDS_NODE_ID)")
	f.StringToStringVar(&cfg.EnvoyXDSNodeMetadata, "envoy-xds-node-metadata", nil, "metadata of the node presented to --envoy-xds-server, as key=value,key2=value2 (CONFIG_GRPC_XDS_NODE_METADATA)")
	f.StringToStringVar(&cfg.EnvoyXDSHeaders, "envoy-xds-headers", nil, "gRPC metadata sent to --envoy-xds-server with the stream, as key=value,key2=value2, such as a token it asks for (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS); never logged")
	f.BoolVar(&cfg.EnvoyXDSTLS, "envoy-xds-tls", false, "dial --envoy-xds-server over TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS)")
	f.StringVar(&cfg.EnvoyXDSTLSCA, "envoy-xds-tls-ca", "", "with --envoy-xds-tls: PEM CA certificates the xDS server's certificate must chain to (default: the system's; CONFIG_GRPC_XDS_SERVER_TLS_CACERT)")
	f.StringVar(&cfg.EnvoyXDSTLSCert, "envoy-xds-tls-cert", "", "with --envoy-xds-tls: PEM client certificate to present, for mutual TLS (CONFIG_GRPC_XDS_CLIENT_TLS_CERT)")
	f.StringVar(&cfg.EnvoyXDSTLSKey, "envoy-xds-tls-key", "", "PEM private key of --envoy-xds-tls-cert (CONFIG_GRPC_XDS_CLIENT_TLS_KEY)")
	f.StringVar(&cfg.EnvoyXDSTLSName, "envoy-xds-tls-server-name", "", "with --envoy-xds-tls: the name the xDS server's certificate must carry (default: the host of --envoy-xds-server; CONFIG_GRPC_XDS_SERVER_TLS_SAN)")
	f.DurationVar(&cfg.EnvoyXDSRetryInterval, "envoy-xds-retry-interval", 3*time.Second, "wait before reconnecting to --envoy-xds-server after the stream ends (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL)")
	addEnvoyStatsFlags(f, &cfg.EnvoyStats)
	f.BoolVar(&cfg.AccessLog, "access-log", false, "log every request as a JSON record (message \"access\"): denials and errors always, allowed checks sampled by --access-log-sample")
	f.Float64Var(&cfg.AccessLogSample, "access-log-sample", defaultAccessLogSample, "with --access-log: fraction of allowed checks logged, 0 to 1")
	f.IntVar(&cfg.MaxMetricSeries, "max-metric-series", metrics.DefaultMaxRuleSeries, "distinct (source, tenant or domain, rule) series of sluice_decisions_total; rules past it are counted under \"_overflow\"")
	addConsoleFlags(f, &cfg)
	addRedisTLSFlags(f, &cfg.RedisTLS)
	return cmd
}

// memoryOptions are the memory store's options; refusals are counted in m
// and reported to log.
func (cfg serveConfig) memoryOptions(m *metrics.Metrics, log *slog.Logger) memory.Options {
	return memory.Options{
		MaxKeys: cfg.MemoryMaxKeys, MaxKeysPerTenant: cfg.MemoryMaxKeysPerTenant,
		OnBudgetExhausted: func(string) { m.BudgetRefused() }, Logger: log,
	}
}

// newLogger returns the JSON logger every command of the service uses.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	return newFormatLogger(w, level, "json")
}

// newFormatLogger returns a logger writing in format, json or text.
func newFormatLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json", "":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("unknown log format %q (want json or text)", format)
}

// validate checks the configuration before anything is opened.
func (cfg serveConfig) validate() error {
	if !sluice.FailureMode(cfg.DefaultFailureMode).Valid() {
		return fmt.Errorf("--default-failure-mode %q is not a failure mode; use closed, open or local", cfg.DefaultFailureMode)
	}
	if cfg.StoreTimeout <= 0 {
		return fmt.Errorf("--store-timeout must be positive, got %v", cfg.StoreTimeout)
	}
	if cfg.ShutdownTimeout < 0 {
		return fmt.Errorf("--shutdown-timeout must not be negative, got %v", cfg.ShutdownTimeout)
	}
	if cfg.Addr == "" {
		return errors.New("--addr is required, e.g. :8080")
	}
	if cfg.AdminToken != "" && cfg.AdminTokenFile != "" {
		return errors.New("--admin-token and --admin-token-file both give the operator token; use one (the file keeps it out of the process list)")
	}
	if cfg.DrainPeriod < 0 {
		return fmt.Errorf("--drain-period must not be negative, got %v", cfg.DrainPeriod)
	}
	if cfg.MetricsAddr != "" && cfg.MetricsAddr == cfg.Addr && !strings.HasSuffix(cfg.Addr, ":0") {
		return fmt.Errorf("--metrics-addr %s is --addr too; give metrics a listener of their own or leave --metrics-addr unset", cfg.MetricsAddr)
	}
	if err := cfg.memoryOptions(nil, nil).Validate(); err != nil {
		return fmt.Errorf("--memory-max-keys / --memory-max-keys-per-tenant: %w", err)
	}
	if cfg.AdminTimeout < 0 {
		return fmt.Errorf("--admin-timeout must not be negative, got %v", cfg.AdminTimeout)
	}
	if cfg.MaxInFlightPerTenant < 0 {
		return fmt.Errorf("--max-in-flight-per-tenant must not be negative, got %d", cfg.MaxInFlightPerTenant)
	}
	if cfg.MaxInFlight < 0 {
		return fmt.Errorf("--max-in-flight must be positive, got %d", cfg.MaxInFlight)
	}
	if cfg.LeaseTTL != 0 && (cfg.LeaseTTL < 4*time.Millisecond || cfg.LeaseTTL > sluice.MaxHoldTTL) {
		return fmt.Errorf("--lease-ttl must be 4ms to %v, got %v", sluice.MaxHoldTTL, cfg.LeaseTTL)
	}
	if cfg.LeaseMaxUnits < 0 || cfg.LeaseMaxUnits > sluice.MaxLeaseWant {
		return fmt.Errorf("--lease-max-units must be 1 to %d, got %d", sluice.MaxLeaseWant, cfg.LeaseMaxUnits)
	}
	if cfg.MaxWait < 0 {
		return fmt.Errorf("--max-wait must not be negative, got %v", cfg.MaxWait)
	}
	if cfg.AccessLogSample < 0 || cfg.AccessLogSample > 1 {
		return fmt.Errorf("--access-log-sample must be between 0 and 1 (a fraction of allowed checks), got %v", cfg.AccessLogSample)
	}
	if cfg.MaxMetricSeries < 0 {
		return fmt.Errorf("--max-metric-series must be positive, got %d", cfg.MaxMetricSeries)
	}
	if err := cfg.tlsFiles().Check(tlsNames); err != nil {
		return err
	}
	if err := cfg.grpcTLSFiles().Check(grpcTLSNames); err != nil {
		return err
	}
	if cfg.GRPCAddr == "" && cfg.GRPCUDS == "" && cfg.GRPCTLSCert != "" {
		return errors.New("--grpc-tls-cert is set but neither --grpc-addr nor --grpc-uds is: there is no gRPC listener to serve it on")
	}
	if cfg.GRPCTLSClientSAN != "" && cfg.GRPCTLSClientCA == "" {
		return errors.New("--grpc-tls-client-san checks client certificates, which needs mutual TLS: set --grpc-tls-client-ca too")
	}
	if cfg.GRPCMaxConnectionAge < 0 || cfg.GRPCMaxConnectionAgeGrace < 0 {
		return fmt.Errorf("--grpc-max-connection-age and --grpc-max-connection-age-grace must not be negative, got %v and %v", cfg.GRPCMaxConnectionAge, cfg.GRPCMaxConnectionAgeGrace)
	}
	if err := envoyrls.CheckKeyFormat(cfg.EnvoyKeyFormat, cfg.EnvoyKeyPrefix, cfg.Redis != ""); err != nil {
		return err
	}
	if err := cfg.RedisTLS.Validate(cfg.Redis); err != nil {
		return err
	}
	if err := cfg.validateXDSTLS(); err != nil {
		return err
	}
	if cfg.EnvoyXDSRetryInterval < 0 {
		return fmt.Errorf("--envoy-xds-retry-interval must not be negative, got %v", cfg.EnvoyXDSRetryInterval)
	}
	if st := cfg.EnvoyStats; st.FlushInterval < 0 || st.NearLimitRatio < 0 || st.NearLimitRatio > 1 {
		return fmt.Errorf("--envoy-stats-flush-interval must not be negative (got %v), --envoy-near-limit-ratio must be from 0 to 1 (got %v)", st.FlushInterval, st.NearLimitRatio)
	}
	if !envoyrls.Counting(cfg.EnvoyCounting).Valid() {
		return fmt.Errorf("--envoy-counting %q is not one of strict (a denied request consumes nothing) or envoy (every hit counts, as envoyproxy/ratelimit)", cfg.EnvoyCounting)
	}
	if cfg.LogFormat != "" && cfg.LogFormat != "json" && cfg.LogFormat != "text" {
		return fmt.Errorf("--log-format %q is not a log format; use json or text", cfg.LogFormat)
	}
	if _, _, err := cfg.adminWriteLimit(); err != nil {
		return err
	}
	if _, err := cfg.usageRetention(); err != nil {
		return err
	}
	if _, err := cfg.auditRetention(); err != nil {
		return err
	}
	return cfg.validateConsole()
}

// adminWriteLimit reads --admin-write-limit: CAPACITY:RATE/UNIT, or off.
func (cfg serveConfig) adminWriteLimit() (l sluice.Limit, off bool, err error) {
	switch cfg.AdminWriteLimit {
	case "":
		return httpapi.DefaultAdminWriteLimit, false, nil
	case "off":
		return sluice.Limit{}, true, nil
	}
	if l, err = sluice.ParseLimitSpec(sluice.AlgorithmTokenBucket, cfg.AdminWriteLimit); err != nil {
		return l, false, fmt.Errorf("--admin-write-limit %q: %w (or off)", cfg.AdminWriteLimit, err)
	}
	return l.Named("writes"), false, nil
}

// The flags of each listener's TLS files, as errors name them.
var (
	tlsNames     = tlsconfig.Names{Cert: "--tls-cert", Key: "--tls-key", ClientCA: "--tls-client-ca"}
	grpcTLSNames = tlsconfig.Names{Cert: "--grpc-tls-cert", Key: "--grpc-tls-key", ClientCA: "--grpc-tls-client-ca"}
)

func (cfg serveConfig) tlsFiles() tlsconfig.Files {
	return tlsconfig.Files{Cert: cfg.TLSCert, Key: cfg.TLSKey, ClientCA: cfg.TLSClientCA}
}

func (cfg serveConfig) grpcTLSFiles() tlsconfig.Files {
	return tlsconfig.Files{Cert: cfg.GRPCTLSCert, Key: cfg.GRPCTLSKey, ClientCA: cfg.GRPCTLSClientCA}
}

// service is a running sluice serve, as tests drive it in-process.
type service struct {
	// Addr is the address the HTTP listener is bound to.
	Addr string
	done chan error
}

// runServe runs the service until ctx ends, then shuts it down gracefully.
func runServe(ctx context.Context, cfg serveConfig, stderr io.Writer) error {
	svc, err := startService(ctx, cfg, stderr)
	if errors.Is(err, httpapi.ErrStoppedStarting) {
		return nil // a SIGTERM while waiting for the catalog
	}
	if err != nil {
		return err
	}
	return <-svc.done
}

// startService opens everything, starts the listeners and returns once the
// service is accepting requests. The service stops when ctx ends; its
// result is then sent on done. Each step below is one function of starter;
// a failed start closes, in reverse order, what the steps before opened.
func startService(ctx context.Context, cfg serveConfig, stderr io.Writer) (*service, error) {
	s, err := newStarter(cfg, stderr)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.closeAll()
		}
	}()
	traces, err := startTracing(ctx, "sluice", s.log)
	if err != nil {
		return nil, err
	}
	s.onClose(traces.shutdown)
	givenToken, err := cfg.adminToken()
	if err != nil {
		return nil, err
	}
	if err := s.listen(traces); err != nil {
		return nil, err
	}
	registry, m := newMetrics(cfg)
	store, storePing, err := s.openStore(m)
	if err != nil {
		return nil, err
	}
	if cfg.wrapStore != nil {
		store = cfg.wrapStore(store)
	}
	var rollups *usage.Recorder
	if cfg.UsageFlush < 0 {
		return nil, fmt.Errorf("--usage-flush must be a positive duration, or 0 to keep no rollups; got %s", cfg.UsageFlush)
	}
	if cfg.UsageFlush > 0 && !cfg.EnvoyMode {
		rollups = usage.NewRecorder(usage.Options{})
		m.UsageRollups(rollups.Pending, rollups.Dropped)
	}
	engine := s.newEngine(store, m, traces, rollups)
	metricsHandler := promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry})
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	s.onClose(func() error { stopRun(); return nil })
	// In ENV mode there is no catalog and no API: nothing to watch.
	var api *httpapi.API
	var watchDone chan error
	if !cfg.EnvoyMode {
		catalog, err := s.openCatalog(ctx, m, givenToken)
		if err != nil {
			return nil, err
		}
		if api, err = s.newAPI(ctx, catalog, engine, m, storePing); err != nil {
			return nil, err
		}
		api.Register(s.mux)
		if cfg.MetricsAddr == "" {
			// Series name tenants and rules: on the listener every tenant
			// reaches, only for the operator or a metrics-role key.
			s.mux.Handle("GET /metrics", api.MetricsHandler(registry))
		}
		watchDone = make(chan error, 1)
		go func() { watchDone <- api.Run(runCtx) }()
		if retention, _ := cfg.auditRetention(); retention > 0 {
			go catalog.RunAuditRetention(runCtx, retention, s.log)
		}
		if pruner, ok := catalog.(interface {
			RunUsageRetention(context.Context, time.Duration, *slog.Logger)
		}); ok && rollups != nil {
			if retention, _ := cfg.usageRetention(); retention > 0 {
				go pruner.RunUsageRetention(runCtx, retention, s.log)
			}
		}
		if w, ok := catalog.(usage.Writer); ok && rollups != nil {
			// Its own context, stopped (and waited for) before the catalog
			// closes: Run's last flush writes what was counted until then.
			usageCtx, stopUsage := context.WithCancel(context.WithoutCancel(ctx))
			usageDone := make(chan struct{})
			go func() {
				defer close(usageDone)
				_ = rollups.Run(usageCtx, w, cfg.UsageFlush, func(err error) {
					s.log.Warn("usage rollups not stored; they wait in a bounded buffer", "err", err, "pending_rows", rollups.Pending(), "dropped_rows", rollups.Dropped())
				})
			}()
			s.onClose(func() error { stopUsage(); <-usageDone; return nil })
		}
	}

	var envoySrv atomic.Pointer[envoyrls.Server]
	stopEnvoy, err := s.startEnvoy(runCtx, &envoySrv, engine, m, traces)
	if err != nil {
		return nil, err
	}
	if !cfg.EnvoyMode {
		stopConsole, err := startConsole(cfg, consoleDeps{API: api, Engine: engine, StorePing: storePing, Envoy: &envoySrv,
			Mux: s.mux, TLS: s.httpTLS, Logger: s.log})
		if err != nil {
			return nil, err
		}
		s.onClose(stopConsole)
		s.mux.Handle("GET /{$}", httpapi.Index(cfg.Console && cfg.ConsoleAddr == ""))
	}

	var sideSrvs []*http.Server
	if cfg.MetricsAddr != "" {
		metricsMux := http.NewServeMux()
		metricsMux.Handle("GET /metrics", metricsHandler)
		srv, err := s.serveSide("--metrics-addr", cfg.MetricsAddr, "metrics listening", metricsMux)
		if err != nil {
			return nil, err
		}
		sideSrvs = append(sideSrvs, srv)
	}
	if cfg.PprofAddr != "" {
		srv, err := s.serveSide("--pprof-addr", cfg.PprofAddr, "pprof listening", httpapi.PprofMux())
		if err != nil {
			return nil, err
		}
		// Closed before the metrics listener, as ever.
		sideSrvs = append([]*http.Server{srv}, sideSrvs...)
	}

	storeName := "memory"
	if cfg.Redis != "" {
		storeName = "redis"
	}
	s.gate.Open()
	if cfg.EnvoyMode {
		s.log.Info("sluice serve listening as envoyproxy/ratelimit (ENV mode: GET /healthcheck and POST /json here, no Sluice API)",
			"addr", s.ln.Addr().String(), "tls", tlsconfig.Mode(s.httpTLS), "store", storeName, "counting", cfg.EnvoyCounting)
	} else {
		s.log.Info("sluice serve listening", "addr", s.ln.Addr().String(), "tls", tlsconfig.Mode(s.httpTLS), "store", storeName,
			"database", catalogdb.Kind(cfg.Database), "default_failure_mode", cfg.DefaultFailureMode,
			"console", s.consoleURL(), "admin_token", s.tokenOrigin)
	}

	svc := &service{Addr: s.ln.Addr().String(), done: make(chan error, 1)}
	ok = true
	drain := func() string {
		if api == nil {
			// ENV mode: Envoy's health goes NOT_SERVING, on gRPC and
			// GET /healthcheck alike.
			if e := envoySrv.Load(); e != nil {
				e.Shutdown()
			}
			return "/healthcheck"
		}
		api.Drain()
		return "/readyz"
	}
	go func() { svc.done <- s.serveUntilDone(ctx, drain, watchDone, sideSrvs, stopEnvoy) }()
	return svc, nil
}

// starter is a sluice serve being started: what every step needs, and what
// the steps so far have opened.
type starter struct {
	cfg    serveConfig
	stderr io.Writer
	log    *slog.Logger
	// httpTLS and grpcTLS are the listeners' certificates; nil when off.
	httpTLS, grpcTLS *tlsconfig.Reloader
	// scheme is http or https, as the operator reaches the listener.
	scheme string

	// Set by listen.
	ln       net.Listener
	mux      *http.ServeMux
	gate     *httpapi.StartGate
	srv      *http.Server
	serveErr chan error

	// tokenOrigin, set by openCatalog, says where the operator token in
	// force came from, for the start banner.
	tokenOrigin string
	// retryCatalog says which catalog errors are waited out.
	retryCatalog func(error) bool

	closers []func() error
}

// newStarter checks the configuration, opens the log, says the start, and
// reads the certificates before anything is opened, so a wrong file fails
// the start at once.
func newStarter(cfg serveConfig, stderr io.Writer) (*starter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log, err := newFormatLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return nil, err
	}
	ver, rev := buildVersion()
	log.Info("sluice serve starting", "version", ver, "revision", rev, "go", runtime.Version())
	cfg.envoyEnv.Log(log)
	s := &starter{cfg: cfg, stderr: stderr, log: log, scheme: "http", retryCatalog: catalogdb.Retryable(cfg.Database)}
	if s.httpTLS, err = tlsconfig.Load(cfg.tlsFiles(), tlsNames, tlsconfig.Options{Logger: log}); err != nil {
		return nil, err
	}
	if s.grpcTLS, err = tlsconfig.Load(cfg.grpcTLSFiles(), grpcTLSNames, tlsconfig.Options{Logger: log}); err != nil {
		return nil, err
	}
	if s.httpTLS != nil {
		s.scheme = "https"
	}
	return s, nil
}

// onClose adds f to what a failed start (or the shutdown) closes.
func (s *starter) onClose(f func() error) { s.closers = append(s.closers, f) }

// closeAll closes what the steps opened, last opened first.
func (s *starter) closeAll() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
}

// listen binds the HTTP listener and serves from now on, so /healthz
// answers while the service waits for the catalog database; the gate hands
// requests to the mux once everything is up (httpapi.StartGate).
func (s *starter) listen(traces *processTracing) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln, s.mux = ln, http.NewServeMux()
	s.srv = httpapi.NewServer(s.mux, s.log)
	s.gate = httpapi.NewStartGate(s.srv.Handler)
	s.srv.Handler = s.cfg.observeHTTP(s.gate, s.log, traces)
	s.srv.TLSConfig = tlsconfig.HTTPConfig(s.httpTLS)
	s.serveErr = make(chan error, 1)
	go func() { s.serveErr <- tlsconfig.ServeHTTP(s.srv, ln) }()
	s.onClose(s.srv.Close)
	return nil
}

// newMetrics is the registry /metrics serves, with the process's own
// collectors, and the collectors of every face.
func newMetrics(cfg serveConfig) (*prometheus.Registry, *metrics.Metrics) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoCollector())
	return registry, metrics.NewWithOptions(registry, metrics.Options{MaxRuleSeries: cfg.MaxMetricSeries})
}

// openStore opens the rate-limit store of --redis (see openStore), with
// the Envoy key format's wrapper when asked. ping is nil for the memory
// store.
func (s *starter) openStore(m *metrics.Metrics) (store sluice.Store, ping func(context.Context) error, err error) {
	redisTLS, err := s.cfg.RedisTLS.Config(s.cfg.Redis)
	if err != nil {
		return nil, nil, err
	}
	store, ping, closeStore, err := openStore(s.cfg.Redis, s.cfg.redisOptions(redisTLS), s.cfg.memoryOptions(m, s.log), s.log)
	if err != nil {
		return nil, nil, err
	}
	s.onClose(closeStore)
	if s.cfg.Redis != "" && s.cfg.EnvoyKeyFormat == envoyKeyFormatRatelimit {
		wrapped, closeKeys, err := withRatelimitKeys(store, s.cfg.Redis, redisTLS, s.cfg.EnvoyKeyPrefix, s.log)
		if err != nil {
			return nil, nil, err
		}
		s.onClose(closeKeys)
		store = wrapped
	}
	return store, ping, nil
}

// openCatalog waits for the catalog database, with backoff (a PostgreSQL
// that does not answer yet is waited for): opened, migrated, and the admin
// token settled. The token the service adopts or generates is its own doing
// (audit: system).
func (s *starter) openCatalog(ctx context.Context, m *metrics.Metrics, givenToken httpapi.GivenAdminToken) (catalogdb.Catalog, error) {
	var catalog catalogdb.Catalog
	err := s.gate.WaitFor(ctx, s.log, "the catalog database", s.retryCatalog, func(ctx context.Context) error {
		if catalog == nil {
			c, err := openMigratedCatalog(ctx, s.cfg.Database)
			if err != nil {
				return err
			}
			catalog = c
			s.onClose(catalog.Close)
			catalog.SetTenantCaps(sluice.TenantCaps{Rules: s.cfg.MaxRulesPerTenant, Keys: s.cfg.MaxKeysPerTenant, Overrides: s.cfg.MaxOverridesPerTenant})
			catalog.ReportWatchErrors(s.log, m.CatalogWatchError)
		}
		var err error
		s.tokenOrigin, err = httpapi.EnsureAdminTokenInForce(sluice.WithActor(ctx, sluice.ActorSystem), catalog, givenToken, baseURL(s.scheme, s.cfg.Addr), s.stderr, s.log)
		return err
	})
	return catalog, err
}

// newEngine is the one engine for the store, shared by every face: one
// breaker, one deny cache, one count of checks in flight.
func (s *starter) newEngine(store sluice.Store, m *metrics.Metrics, traces *processTracing, rollups *usage.Recorder) *check.Engine {
	engine := check.New(store, check.Options{
		Guard: guard.Options{
			Timeout: s.cfg.StoreTimeout,
			MaxWait: s.cfg.MaxWait,
			OnStateChange: func(name, from, to string) {
				s.log.Warn("store circuit breaker changed state", "breaker", name, "from", from, "to", to)
			},
		},
		Metrics:                 m,
		MaxInFlight:             s.cfg.MaxInFlight,
		MaxInFlightPerNamespace: s.cfg.MaxInFlightPerTenant,
		LeaseHotRate:            s.cfg.LeaseHotRate,
		LeaseTTL:                s.cfg.LeaseTTL,
		MaxLeaseUnits:           s.cfg.LeaseMaxUnits,
		TracerProvider:          traces.TracerProvider(),
		Usage:                   rollups,
	})
	s.onClose(engine.Close)
	return engine
}

// newAPI is the check and admin API; its first catalog snapshot is waited
// for like the database.
func (s *starter) newAPI(ctx context.Context, catalog sluice.Catalog, engine *check.Engine, m *metrics.Metrics, storePing func(context.Context) error) (*httpapi.API, error) {
	var api *httpapi.API
	err := s.gate.WaitFor(ctx, s.log, "the catalog database", s.retryCatalog, func(ctx context.Context) (err error) {
		writeLimit, noWriteLimit, err := s.cfg.adminWriteLimit()
		if err != nil {
			return err
		}
		api, err = httpapi.New(ctx, httpapi.Options{
			AdminWriteLimit:    writeLimit,
			NoAdminWriteLimit:  noWriteLimit,
			Catalog:            catalog,
			Engine:             engine,
			AdminTimeout:       s.cfg.AdminTimeout,
			Metrics:            m,
			Logger:             s.log,
			DefaultFailureMode: sluice.FailureMode(s.cfg.DefaultFailureMode),
			StorePing:          storePing,
		})
		return err
	})
	return api, err
}

// startEnvoy starts the Envoy rate-limit server. It shares the store,
// guard, logs, metrics and mux (GET /healthcheck only); with neither
// --grpc-addr, --envoy-json-addr nor --envoy-config it does nothing. stop
// may be called more than once: by the shutdown, and by closeAll if the
// start fails.
func (s *starter) startEnvoy(ctx context.Context, srv *atomic.Pointer[envoyrls.Server], engine *check.Engine, m *metrics.Metrics, traces *processTracing) (stop func(context.Context) error, err error) {
	cfg := s.cfg
	var stats *envoyrls.EnvStats
	if cfg.EnvoyConfig != "" || cfg.EnvoyXDSServer != "" {
		opts := cfg.EnvoyStats
		opts.Logger = s.log
		if stats, err = envoyrls.NewEnvStats(opts); err != nil {
			return nil, fmt.Errorf("envoyproxy/ratelimit's stats (--envoy-statsd-addr, --envoy-prometheus-addr): %w", err)
		}
	}
	opts := cfg.Envoy.options()
	opts.Engine, opts.Logger, opts.Metrics, opts.Stats = engine, s.log, m, stats
	opts.ResponseHeaders, opts.Counting, opts.StopIncrementWhenOverLimit = cfg.EnvoyResponseHeaders, envoyrls.Counting(cfg.EnvoyCounting), cfg.EnvoyStopIncrement
	opts.RatelimitKeys, opts.ServeBeforeConfig = cfg.EnvoyKeyFormat == envoyKeyFormatRatelimit, cfg.EnvoyServeBeforeConfig
	stopOnce, err := envoyrls.StartService(ctx, envoyrls.ServiceConfig{
		Options: opts,
		Source: envoyrls.Source{Dir: cfg.EnvoyConfig, XDSServer: cfg.EnvoyXDSServer, XDSTLS: cfg.xdsTLS(), XDS: envoyrls.XDSOptions{
			NodeID: cfg.EnvoyXDSNodeID, NodeMetadata: cfg.EnvoyXDSNodeMetadata, Headers: cfg.EnvoyXDSHeaders, RetryInterval: cfg.EnvoyXDSRetryInterval}},
		GRPCAddr: cfg.GRPCAddr, GRPCUDS: cfg.GRPCUDS,
		GRPC: envoyrls.GRPCOptions{MaxConnAge: cfg.GRPCMaxConnectionAge, MaxConnAgeGrace: cfg.GRPCMaxConnectionAgeGrace,
			TLS: s.grpcTLS, ClientSAN: cfg.GRPCTLSClientSAN, Extra: cfg.grpcOptions(s.log, traces)},
		JSONAddr: cfg.EnvoyJSONAddr, JSONTLS: s.httpTLS, NewHTTPServer: httpapi.NewServer,
		Mux: s.mux, JSONOnMux: cfg.EnvoyMode, DebugAddr: cfg.DebugAddr, Started: srv,
	})
	if err != nil {
		_ = stats.Close()
		return nil, err
	}
	var once sync.Once
	stop = func(ctx context.Context) (err error) {
		// The stats last, so they count the calls the shutdown let finish.
		once.Do(func() { err = errors.Join(stopOnce(ctx), stats.Close()) })
		return err
	}
	s.onClose(func() error { return stop(context.Background()) })
	return stop, nil
}

// serveSide serves handler on a listener of its own (--metrics-addr,
// --pprof-addr), with the main listener's TLS.
func (s *starter) serveSide(flag, addr, msg string, handler http.Handler) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = s.srv.Close()
		return nil, fmt.Errorf("listen on %s %s: %w", flag, addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsconfig.HTTPConfig(s.httpTLS),
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	go func() { _ = tlsconfig.ServeHTTP(srv, ln) }()
	s.log.Info(msg, "addr", ln.Addr().String(), "tls", tlsconfig.Mode(s.httpTLS))
	return srv, nil
}

// serveUntilDone serves until ctx ends (then drains and shuts down
// gracefully), the HTTP server fails, or the catalog watch ends, and
// returns why it stopped: nil for ctx.
func (s *starter) serveUntilDone(ctx context.Context, drain func() (probe string), watchDone <-chan error, sideSrvs []*http.Server, stopEnvoy func(context.Context) error) error {
	log := s.log
	var result error
	select {
	case <-ctx.Done():
		// Readiness fails first while everything is still served, so
		// load balancers stop sending before the listener closes.
		probe := drain()
		log.Info("draining: "+probe+" answers 503, requests are still served", "period", s.cfg.DrainPeriod.String())
		select {
		case <-time.After(s.cfg.DrainPeriod):
		case err := <-s.serveErr:
			result = fmt.Errorf("HTTP server: %w", err)
		}
		log.Info("shutting down: finishing in-flight requests", "timeout", s.cfg.ShutdownTimeout.String())
	case err := <-s.serveErr:
		result = fmt.Errorf("HTTP server: %w", err)
	case err := <-watchDone:
		// The catalog cannot be watched: changes would go unseen.
		result = err
		if result == nil {
			result = errors.New("catalog watch ended unexpectedly")
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("in-flight requests did not finish before the shutdown timeout", "error", err)
		_ = s.srv.Close()
	}
	for _, srv := range sideSrvs {
		_ = srv.Close()
	}
	if err := stopEnvoy(shutdownCtx); err != nil {
		log.Warn("envoy rate-limit server did not stop cleanly", "error", err)
	}
	s.closeAll()
	log.Info("sluice serve stopped")
	return result
}

// baseURL is the URL the operator reaches the listener addr at.
// consoleURL is where the web console is served, for the start banner;
// "off" without one.
func (s *starter) consoleURL() string {
	switch {
	case !s.cfg.Console:
		return "off"
	case s.cfg.ConsoleAddr != "":
		return baseURL(s.scheme, s.cfg.ConsoleAddr) + "/console/"
	}
	return baseURL(s.scheme, s.ln.Addr().String()) + "/console/"
}

func baseURL(scheme, addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host != "" && host != "0.0.0.0" && host != "::" {
		return scheme + "://" + net.JoinHostPort(host, port)
	}
	return scheme + "://localhost" + addr
}

// addEnvoyStatsFlags declares the flags of envoyproxy/ratelimit's stats,
// each named after the variable it mirrors there.
func addEnvoyStatsFlags(f *pflag.FlagSet, o *envoyrls.EnvStatsOptions) {
	f.StringVar(&o.StatsdAddr, "envoy-statsd-addr", "", "host:port of a statsd server to send envoyproxy/ratelimit's stats to, under its names (off when empty; USE_STATSD, STATSD_HOST, STATSD_PORT)")
	f.StringVar(&o.StatsdProtocol, "envoy-statsd-protocol", "udp", "how --envoy-statsd-addr is reached: udp or tcp (gostats' STATSD_PROTOCOL, tcp in envoyproxy/ratelimit)")
	f.DurationVar(&o.FlushInterval, "envoy-stats-flush-interval", envoyrls.DefaultStatsFlushInterval, "how often envoyproxy/ratelimit's stats are sent (STATS_FLUSH_INTERVAL)")
	f.StringToStringVar(&o.Tags, "envoy-stats-tags", nil, "tags added to every one of envoyproxy/ratelimit's stats, as key=value,key2=value2 (EXTRA_TAGS)")
	f.Float64Var(&o.NearLimitRatio, "envoy-near-limit-ratio", envoyrls.DefaultNearLimitRatio, "share of a limit past which hits count as near_limit in envoyproxy/ratelimit's stats (NEAR_LIMIT_RATIO)")
	f.StringVar(&o.PrometheusAddr, "envoy-prometheus-addr", "", "listener serving envoyproxy/ratelimit's stats as the Prometheus series it serves, e.g. :9090 (off when empty; USE_PROMETHEUS, PROMETHEUS_ADDR); Sluice's own metrics stay on /metrics of --addr or --metrics-addr")
	f.StringVar(&o.PrometheusPath, "envoy-prometheus-path", "/metrics", "path of --envoy-prometheus-addr's series (PROMETHEUS_PATH)")
	f.StringVar(&o.PrometheusMapper, "envoy-prometheus-mapper", "", "statsd_exporter mapping file replacing envoyproxy/ratelimit's default mapping of its stats to Prometheus series (PROMETHEUS_MAPPER_YAML)")
	f.BoolVar(&o.PrometheusResponseTimeMillis, "envoy-prometheus-response-time-ms", false, "with the default mapping, ratelimit_service_response_time_seconds in milliseconds, as envoyproxy/ratelimit's legacy (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)")
}
