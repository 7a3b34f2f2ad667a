package envoyrls

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit is configured by environment variables alone
// (src/settings/settings.go there). So that a Deployment written for it works
// by swapping the image, sluice serve reads them too, through the one table
// below: each row names the variables, and either the flag they set, or why
// Sluice ignores them, or that Sluice does not implement them. A flag given
// on the command line or as SLUICE_<FLAG> wins over them.
//
// They are read only when the environment looks like envoyproxy/ratelimit's:
// some variable of the table is set other than the generic names HOST, PORT,
// LOG_LEVEL and LOG_FORMAT, which platforms set for any program. Then, as
// there, the gRPC service listens on 0.0.0.0:8081 (not on a unix socket
// alone), the debug listener on 0.0.0.0:6070, and the configuration is read
// from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, each with
// envoyproxy/ratelimit's default when unset. A variable set to "" counts as
// unset.

// EnvKind is what sluice serve does with a row's variables.
type EnvKind int

const (
	// EnvMapped variables set a flag.
	EnvMapped EnvKind = iota
	// EnvIgnored variables have no use in Sluice, for the row's reason.
	EnvIgnored
	// EnvMissing variables mean something Sluice does not do: they are
	// named in a startup warning.
	EnvMissing
)

// EnvGet returns a variable's value, "" when unset.
type EnvGet func(name string) string

// EnvRow is one row of the table.
type EnvRow struct {
	Vars []string
	Kind EnvKind
	// Flag is the sluice serve flag a mapped row sets.
	Flag string
	// value computes the flag's value from the variables; ok false leaves
	// the flag alone. It is called whenever the environment is
	// envoyproxy/ratelimit's, so it may apply a default of there. Nil: the
	// single variable's value, when set.
	value func(get EnvGet) (v string, ok bool, err error)
	// Reason says why an ignored row is ignored.
	Reason string
}

func mapped(flag string, value func(EnvGet) (string, bool, error), vars ...string) EnvRow {
	return EnvRow{Vars: vars, Kind: EnvMapped, Flag: flag, value: value}
}

func ignored(reason string, vars ...string) EnvRow {
	return EnvRow{Vars: vars, Kind: EnvIgnored, Reason: reason}
}

func missing(vars ...string) EnvRow {
	return EnvRow{Vars: vars, Kind: EnvMissing}
}

// KeyFormatRatelimit is the value of --envoy-key-format that counts under
// envoyproxy/ratelimit's Redis keys.
const KeyFormatRatelimit = "ratelimit"

// EnvTable is every variable of envoyproxy/ratelimit and what sluice
// serve does with it. docs/envoy.md's migration section says the same for
// users; a test checks that every mapped row names a flag of sluice serve.
var EnvTable = []EnvRow{
	// Listeners.
	mapped("addr", hostPort("HOST", "PORT", "8080", false), "HOST", "PORT"),
	mapped("grpc-addr", grpcAddr, "GRPC_HOST", "GRPC_PORT"), // off with GRPC_UDS set, as there
	mapped("grpc-uds", nil, "GRPC_UDS"),
	mapped("debug-addr", hostPort("DEBUG_HOST", "DEBUG_PORT", "6070", true), "DEBUG_HOST", "DEBUG_PORT"),
	mapped("grpc-max-connection-age", withDefault("GRPC_MAX_CONNECTION_AGE", "24h"), "GRPC_MAX_CONNECTION_AGE"),
	mapped("grpc-max-connection-age-grace", withDefault("GRPC_MAX_CONNECTION_AGE_GRACE", "1h"), "GRPC_MAX_CONNECTION_AGE_GRACE"),
	mapped("grpc-tls-cert", whenTLS("GRPC_SERVER_TLS_CERT", true), "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT"),
	// (GRPC_SERVER_USE_TLS, read by the row above, is what these need too.)
	mapped("grpc-tls-key", whenTLS("GRPC_SERVER_TLS_KEY", true), "GRPC_SERVER_TLS_KEY"),
	mapped("grpc-tls-client-ca", whenTLS("GRPC_CLIENT_TLS_CACERT", false), "GRPC_CLIENT_TLS_CACERT"),
	mapped("grpc-tls-client-san", whenTLS("GRPC_CLIENT_TLS_SAN", false), "GRPC_CLIENT_TLS_SAN"),

	// Logs.
	mapped("log-level", logLevel, "LOG_LEVEL"),
	mapped("log-format", logFormat, "LOG_FORMAT"),

	// Configuration.
	mapped("envoy-config", runtimeDir, "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "CONFIG_TYPE"),
	ignored("Sluice watches the configuration directory with inotify (and polls it every second as a safety net), which sees edits and Kubernetes' symlink swaps alike", "RUNTIME_WATCH_ROOT"),
	mapped("envoy-ignore-dotfiles", nil, "RUNTIME_IGNOREDOTFILES"),
	mapped("envoy-merge-domains", nil, "MERGE_DOMAIN_CONFIG"),
	mapped("envoy-xds-server", whenXDS("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), "CONFIG_GRPC_XDS_SERVER_URL"),
	mapped("envoy-xds-node-id", whenXDS("CONFIG_GRPC_XDS_NODE_ID", ""), "CONFIG_GRPC_XDS_NODE_ID"),
	mapped("envoy-xds-retry-interval", whenXDS("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", ""), "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"),
	mapped("envoy-serve-before-config", nil, "FORCE_START_WITHOUT_INITIAL_CONFIG"),
	mapped("envoy-xds-tls", whenXDS("CONFIG_GRPC_XDS_SERVER_USE_TLS", ""), "CONFIG_GRPC_XDS_SERVER_USE_TLS"),
	// (The files apply, as there, with CONFIG_GRPC_XDS_SERVER_USE_TLS.)
	mapped("envoy-xds-tls-ca", whenXDSTLS("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
	mapped("envoy-xds-tls-cert", whenXDSTLS("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
	mapped("envoy-xds-tls-key", whenXDSTLS("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
	mapped("envoy-xds-tls-server-name", whenXDSTLS("CONFIG_GRPC_XDS_SERVER_TLS_SAN"), "CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
	mapped("envoy-xds-node-metadata", whenXDS("CONFIG_GRPC_XDS_NODE_METADATA", ""), "CONFIG_GRPC_XDS_NODE_METADATA"),
	mapped("envoy-xds-headers", xdsHeaders, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"),
	missing(
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"),
	ignored("Sluice's health is SERVING once its configuration is loaded, and a start with a broken file fails", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"),

	// Answers.
	// Header names as envoyproxy/ratelimit's by default (--envoy-header-style envoy).
	mapped("envoy-response-headers", nil, "LIMIT_RESPONSE_HEADERS_ENABLED"),
	mapped("envoy-header-limit", nil, "LIMIT_LIMIT_HEADER"),
	mapped("envoy-header-remaining", nil, "LIMIT_REMAINING_HEADER"),
	mapped("envoy-header-reset", nil, "LIMIT_RESET_HEADER"),
	mapped("envoy-shadow", nil, "SHADOW_MODE"),
	mapped("envoy-dynamic-metadata", nil, "RESPONSE_DYNAMIC_METADATA"),
	missing("QUOTA_MODE"),

	// Store.
	mapped("redis", redisURL, "REDIS_URL", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_AUTH", "BACKEND_TYPE"),
	// (REDIS_TLS, read by the row above for rediss://, is what these need.)
	mapped("redis-tls", whenRedisTLS("REDIS_TLS", true), "REDIS_TLS"),
	mapped("redis-tls-ca", whenRedisTLS("REDIS_TLS_CACERT", false), "REDIS_TLS_CACERT"),
	mapped("redis-tls-cert", whenRedisTLS("REDIS_TLS_CLIENT_CERT", false), "REDIS_TLS_CLIENT_CERT"),
	mapped("redis-tls-key", whenRedisTLS("REDIS_TLS_CLIENT_KEY", false), "REDIS_TLS_CLIENT_KEY"),
	mapped("redis-tls-skip-hostname-verification", whenRedisTLS("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false), "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"),
	ignored("Sluice pipelines every check over a few multiplexed connections per Redis node; there is no pool to size or to wait on",
		"REDIS_POOL_SIZE", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM"),
	ignored("each store call has its own deadline, --store-timeout, kept short on purpose: a slow Redis must not hold Envoy's calls for seconds", "REDIS_TIMEOUT"),
	ignored("Sluice's readiness (/readyz) asks the store at every probe", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"),
	missing("REDIS_SENTINEL_AUTH",
		"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"),
	missing("REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
		"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
		"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_TIMEOUT",
		"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"),
	missing("MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT",
		"MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"),
	// With REDIS_URL, counters are shared with envoyproxy/ratelimit's fleet
	// on that Redis, so a rolling migration neither doubles limits nor
	// resets windows.
	mapped("envoy-key-format", ratelimitKeyFormat),
	mapped("envoy-key-prefix", whenRedis("CACHE_KEY_PREFIX"), "CACHE_KEY_PREFIX"),
	ignored("Sluice's local deny cache is always on: exact (it never denies what the store would allow), bounded in entries, cleared on every configuration change", "LOCAL_CACHE_SIZE_IN_BYTES"),
	mapped("envoy-stop-increment-when-over-limit", nil, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"),
	ignored("Sluice's keys expire exactly when dropping them loses nothing, never with jitter", "EXPIRATION_JITTER_MAX_SECONDS"),

	// Metrics and tracing.
	// envoyproxy/ratelimit's stats, under its names (EnvStats); Sluice's
	// own metrics stay on /metrics of --addr or --metrics-addr.
	mapped("envoy-statsd-addr", statsdAddr, "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "DISABLE_STATS"),
	mapped("envoy-statsd-protocol", statsdProtocol, "STATSD_PROTOCOL"),
	mapped("envoy-stats-flush-interval", nil, "STATS_FLUSH_INTERVAL"),
	mapped("envoy-stats-tags", extraTags, "EXTRA_TAGS"),
	mapped("envoy-near-limit-ratio", nil, "NEAR_LIMIT_RATIO"),
	missing("USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS"),
	mapped("envoy-prometheus-addr", prometheusAddr, "USE_PROMETHEUS", "PROMETHEUS_ADDR"),
	mapped("envoy-prometheus-path", whenPrometheus("PROMETHEUS_PATH"), "PROMETHEUS_PATH"),
	mapped("envoy-prometheus-mapper", whenPrometheus("PROMETHEUS_MAPPER_YAML"), "PROMETHEUS_MAPPER_YAML"),
	mapped("envoy-prometheus-response-time-ms", whenPrometheus("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"), "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"),
	missing("TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL",
		"TRACING_SAMPLING_RATE"),
}

// envGeneric are variables platforms set for any program: they alone do
// not make an environment envoyproxy/ratelimit's.
var envGeneric = map[string]bool{"HOST": true, "PORT": true, "LOG_LEVEL": true, "LOG_FORMAT": true}

// EnvReport is what the environment did, for the startup log. It holds
// variable and flag names, never values: REDIS_AUTH is a secret.
type EnvReport struct {
	Applied    []string // "HOST,PORT -> --addr"
	Overridden []string // variables whose flag was given
	Ignored    []string // "USE_STATSD: reason"
	Missing    []string // variables Sluice does not implement
	Notes      []string // differences worth a warning
}

// Log writes the report: what was applied, and one warning naming every
// variable that was set but not acted on.
func (r EnvReport) Log(l *slog.Logger) {
	if len(r.Applied) > 0 {
		l.Info("envoyproxy/ratelimit environment variables read", "applied", r.Applied, "overridden_by_flags", r.Overridden)
	}
	if len(r.Ignored) > 0 || len(r.Missing) > 0 {
		l.Warn("envoyproxy/ratelimit environment variables set but not acted on (docs/envoy.md#migrating-from-envoyproxyratelimit)",
			"not_implemented", r.Missing, "ignored", r.Ignored)
	}
	for _, n := range r.Notes {
		l.Warn(n)
	}
}

// EnvFlags is what ApplyEnv needs of sluice serve's flags: the command line
// declares them, this package says what the variables set them to.
type EnvFlags interface {
	// Has reports whether the command has the flag.
	Has(flag string) bool
	// Changed reports whether the flag was given (on the command line or as
	// SLUICE_<FLAG>).
	Changed(flag string) bool
	// Check parses value as the flag would, without setting it. show says
	// whether an error may quote the value: true for durations, booleans
	// and integers, never a secret; false for strings, which may be one.
	Check(flag, value string) (show bool, err error)
	// Set sets the flag.
	Set(flag, value string) error
}

// ApplyEnv sets the flags that were not given from envoyproxy/ratelimit's
// variables in lookup, as EnvTable says. A variable with a value Sluice
// cannot honour is an error naming it, and nothing is set.
func ApplyEnv(fs EnvFlags, lookup func(string) (string, bool)) (EnvReport, error) {
	if !EnvIsRatelimit(lookup) {
		return EnvReport{}, nil
	}
	return applyEnv(fs, lookup)
}

// ApplyEnvAsRatelimit is ApplyEnv for ENV mode (the binary started as
// /bin/ratelimit): the table applies, with envoyproxy/ratelimit's defaults
// for what is unset, even when no variable of it is set.
func ApplyEnvAsRatelimit(fs EnvFlags, lookup func(string) (string, bool)) (EnvReport, error) {
	return applyEnv(fs, lookup)
}

// EnvIsRatelimit reports whether the environment is envoyproxy/ratelimit's:
// some variable of EnvTable is set, other than the generic HOST, PORT,
// LOG_LEVEL and LOG_FORMAT.
func EnvIsRatelimit(lookup func(string) (string, bool)) bool {
	for _, row := range EnvTable {
		for _, v := range row.Vars {
			if value, _ := lookup(v); value != "" && !envGeneric[v] {
				return true
			}
		}
	}
	return false
}

func applyEnv(fs EnvFlags, lookup func(string) (string, bool)) (EnvReport, error) {
	var report EnvReport
	get := func(name string) string {
		v, _ := lookup(name)
		return v
	}
	type setting struct {
		flag, value string
		vars        []string
	}
	var sets []setting
	var errs []error
	for _, row := range EnvTable {
		var set []string
		for _, v := range row.Vars {
			if get(v) != "" {
				set = append(set, v)
			}
		}
		switch row.Kind {
		case EnvIgnored:
			for _, v := range set {
				report.Ignored = append(report.Ignored, v+": "+row.Reason)
			}
			continue
		case EnvMissing:
			report.Missing = append(report.Missing, set...)
			continue
		}
		if !fs.Has(row.Flag) {
			// The table test keeps this from happening.
			return report, fmt.Errorf("internal error: %s map to --%s, which sluice serve does not have", strings.Join(row.Vars, ", "), row.Flag)
		}
		value, ok, err := rowValue(row, get)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			for _, v := range set {
				if v == "CONFIG_TYPE" {
					continue // it chose the other source's rows
				}
				report.Ignored = append(report.Ignored, v+": no effect with the other variables as they are set, as in envoyproxy/ratelimit")
			}
			continue
		}
		if fs.Changed(row.Flag) {
			report.Overridden = append(report.Overridden, set...)
			continue
		}
		sets = append(sets, setting{row.Flag, value, set})
		from := strings.Join(set, ",")
		if from == "" {
			from = "envoyproxy/ratelimit's default"
		}
		report.Applied = append(report.Applied, from+" -> --"+row.Flag)
	}
	// Every value is checked before the first is set, so a bad one changes
	// nothing.
	for _, s := range sets {
		if show, err := fs.Check(s.flag, s.value); err != nil {
			shown := ""
			if show {
				shown = fmt.Sprintf("=%q", s.value) // never a secret
			}
			errs = append(errs, fmt.Errorf("environment variable %s%s is not a valid value for --%s: %w", strings.Join(s.vars, ","), shown, s.flag, err))
		}
	}
	if len(errs) > 0 {
		return EnvReport{}, errors.Join(errs...)
	}
	if get("REDIS_URL") == "" && !fs.Changed("redis") {
		report.Notes = append(report.Notes, "REDIS_URL is not set: counters live in this process's memory and are not shared with other instances (envoyproxy/ratelimit would dial /var/run/nutcracker/ratelimit.sock)")
	}
	for _, s := range sets {
		if err := fs.Set(s.flag, s.value); err != nil {
			return EnvReport{}, fmt.Errorf("environment variable %s is not a valid value for --%s: %w", strings.Join(s.vars, ","), s.flag, err)
		}
	}
	return report, nil
}

func rowValue(row EnvRow, get EnvGet) (string, bool, error) {
	if row.value != nil {
		return row.value(get)
	}
	v := get(row.Vars[0])
	return v, v != "", nil
}

// withDefault is the variable's value, or envoyproxy/ratelimit's default.
func withDefault(name, def string) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		if v := get(name); v != "" {
			return v, true, nil
		}
		return def, true, nil
	}
}

// hostPort joins a host and a port variable (host default 0.0.0.0). With
// neither set, the flag is left alone unless always, then defPort is used.
func hostPort(hostVar, portVar, defPort string, always bool) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		host, port := get(hostVar), get(portVar)
		if host == "" && port == "" && !always {
			return "", false, nil
		}
		if host == "" {
			host = "0.0.0.0"
		}
		if port == "" {
			port = defPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return "", false, fmt.Errorf("environment variable %s=%q is not a port number (0 to 65535)", portVar, port)
		}
		return net.JoinHostPort(host, port), true, nil
	}
}

// grpcAddr is GRPC_HOST:GRPC_PORT, 0.0.0.0:8081 by default; with GRPC_UDS
// set, envoyproxy/ratelimit listens on the socket alone, and so does Sluice.
func grpcAddr(get EnvGet) (string, bool, error) {
	if get("GRPC_UDS") != "" {
		return "", false, nil
	}
	return hostPort("GRPC_HOST", "GRPC_PORT", "8081", true)(get)
}

// envBool reads a boolean variable as envconfig does (strconv.ParseBool).
func envBool(get EnvGet, name string) (bool, error) {
	v := get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("environment variable %s=%q is not a boolean (true or false)", name, v)
	}
	return b, nil
}

// whenTLS passes a TLS file variable on when GRPC_SERVER_USE_TLS is true, as
// envoyproxy/ratelimit reads them only then.
func whenTLS(name string, required bool) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		on, err := envBool(get, "GRPC_SERVER_USE_TLS")
		if err != nil || !on {
			return "", false, err
		}
		v := get(name)
		if v == "" && required {
			return "", false, fmt.Errorf("GRPC_SERVER_USE_TLS=true needs %s too", name)
		}
		return v, v != "", nil
	}
}

// logLevel maps logrus's levels to slog's.
func logLevel(get EnvGet) (string, bool, error) {
	v := strings.ToLower(get("LOG_LEVEL"))
	switch v {
	case "":
		return "", false, nil
	case "trace", "debug":
		return "debug", true, nil
	case "info":
		return "info", true, nil
	case "warn", "warning":
		return "warn", true, nil
	case "error", "fatal", "panic":
		return "error", true, nil
	}
	return "", false, fmt.Errorf("environment variable LOG_LEVEL=%q is not a log level (trace, debug, info, warn, error, fatal or panic)", get("LOG_LEVEL"))
}

func logFormat(get EnvGet) (string, bool, error) {
	v := strings.ToLower(get("LOG_FORMAT"))
	switch v {
	case "":
		return "", false, nil
	case "json", "text":
		return v, true, nil
	}
	return "", false, fmt.Errorf("environment variable LOG_FORMAT=%q is not a log format (text or json)", get("LOG_FORMAT"))
}

// runtimeDir is the directory goruntime reads the configuration from.
func runtimeDir(get EnvGet) (string, bool, error) {
	xds, err := configFromXDS(get)
	if err != nil || xds {
		return "", false, err
	}
	root := get("RUNTIME_ROOT")
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	app := get("RUNTIME_APPDIRECTORY")
	if app == "" {
		app = "config"
	}
	return filepath.Join(root, get("RUNTIME_SUBDIRECTORY"), app), true, nil
}

// configFromXDS tells whether CONFIG_TYPE asks for the xDS source.
func configFromXDS(get EnvGet) (bool, error) {
	switch t := get("CONFIG_TYPE"); strings.ToUpper(t) {
	case "", "FILE":
		return false, nil
	case "GRPC_XDS_SOTW":
		return true, nil
	default:
		return false, fmt.Errorf("environment variable CONFIG_TYPE=%q is not a configuration type (FILE or GRPC_XDS_SOTW)", t)
	}
}

// whenXDS passes an xDS variable on (or envoyproxy/ratelimit's default, if
// any) when CONFIG_TYPE=GRPC_XDS_SOTW.
func whenXDS(name, def string) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		xds, err := configFromXDS(get)
		if err != nil || !xds {
			return "", false, nil // CONFIG_TYPE's own error is the runtime row's
		}
		v := get(name)
		if v == "" {
			v = def
		}
		return v, v != "", nil
	}
}

// xdsHeaders turns CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, envconfig's
// map form key:value,key2:value2, into the flag's key=value,key2=value2.
func xdsHeaders(get EnvGet) (string, bool, error) {
	v, ok, err := whenXDS("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "")(get)
	if err != nil || !ok {
		return "", false, err
	}
	pairs := strings.Split(v, ",")
	for i, p := range pairs {
		k, val, found := strings.Cut(p, ":")
		if !found || k == "" {
			// The value may be a secret: name the variable, not the value.
			return "", false, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: entry %d is not key:value", i+1)
		}
		pairs[i] = k + "=" + val
	}
	return strings.Join(pairs, ","), true, nil
}

// whenXDSTLS passes a variable on with CONFIG_TYPE=GRPC_XDS_SOTW and
// CONFIG_GRPC_XDS_SERVER_USE_TLS true.
func whenXDSTLS(name string) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		xds, err := configFromXDS(get)
		if err != nil || !xds {
			return "", false, nil
		}
		on, err := envBool(get, "CONFIG_GRPC_XDS_SERVER_USE_TLS")
		if err != nil || !on {
			return "", false, err
		}
		v := get(name)
		return v, v != "", nil
	}
}

// redisURL turns REDIS_URL and its companions into a Sluice Redis URL.
// REDIS_URL is host:port (a comma list of nodes for a cluster; the master
// set name, then the sentinels, for Sentinel); REDIS_AUTH is a password or
// user:password.
func redisURL(get EnvGet) (string, bool, error) {
	if b := get("BACKEND_TYPE"); b != "" && !strings.EqualFold(b, "redis") {
		return "", false, fmt.Errorf("BACKEND_TYPE=%q is not implemented in Sluice, which stores counters in Redis (or in memory without REDIS_URL)", b)
	}
	raw := get("REDIS_URL")
	if raw == "" {
		return "", false, nil
	}
	if strings.Contains(raw, "://") {
		// Already a Sluice URL: taken as it is.
		return raw, true, nil
	}
	if st := get("REDIS_SOCKET_TYPE"); st != "" && !strings.EqualFold(st, "tcp") {
		return "", false, fmt.Errorf("REDIS_SOCKET_TYPE=%q is not implemented in Sluice, which reaches Redis over TCP: set REDIS_SOCKET_TYPE=tcp and REDIS_URL to host:port", st)
	}
	useTLS, err := envBool(get, "REDIS_TLS")
	if err != nil {
		return "", false, err
	}
	var user *url.Userinfo
	if auth := get("REDIS_AUTH"); auth != "" {
		if name, pass, ok := strings.Cut(auth, ":"); ok {
			user = url.UserPassword(name, pass)
		} else {
			user = url.UserPassword("", auth)
		}
	}
	hosts := strings.Split(raw, ",")
	servers := hosts
	if strings.EqualFold(get("REDIS_TYPE"), "sentinel") {
		if len(hosts) < 2 {
			return "", false, errors.New("REDIS_URL with REDIS_TYPE=sentinel needs the master set name, then the sentinels: mymaster,host1:26379,host2:26379")
		}
		servers = hosts[1:]
	}
	for _, h := range servers {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return "", false, fmt.Errorf("REDIS_URL: %q is not host:port (Sluice reaches Redis over TCP only)", h)
		}
	}
	u := url.URL{User: user}
	switch t := strings.ToLower(get("REDIS_TYPE")); t {
	case "", "single":
		if len(hosts) != 1 {
			return "", false, fmt.Errorf("REDIS_URL lists %d servers but REDIS_TYPE is single: set REDIS_TYPE=cluster or sentinel, or give one host:port", len(hosts))
		}
		u.Scheme, u.Host = "redis", raw
		if useTLS {
			u.Scheme = "rediss"
		}
	case "cluster":
		// TLS comes from --redis-tls (REDIS_TLS): there is no TLS scheme
		// of a cluster URL.
		u.Scheme, u.Host = "redis-cluster", raw
	case "sentinel":
		if useTLS {
			return "", false, errors.New("REDIS_TLS=true with REDIS_TYPE=sentinel is not implemented in Sluice")
		}
		if user != nil && user.Username() != "" {
			return "", false, errors.New("REDIS_AUTH as user:password with REDIS_TYPE=sentinel is not implemented in Sluice: give the password alone")
		}
		pass, _ := user.Password()
		u.Scheme, u.Host = "redis-sentinel", strings.Join(servers, ",")
		u.User = url.User(hosts[0])
		if pass != "" {
			u.User = url.UserPassword(hosts[0], pass)
		}
	default:
		return "", false, fmt.Errorf("environment variable REDIS_TYPE=%q is not a Redis type (single, cluster or sentinel)", get("REDIS_TYPE"))
	}
	return u.String(), true, nil
}

// ratelimitKeyFormat keeps envoyproxy/ratelimit's Redis keys when the
// environment gives its Redis.
func ratelimitKeyFormat(get EnvGet) (string, bool, error) {
	if get("REDIS_URL") == "" {
		return "", false, nil
	}
	return KeyFormatRatelimit, true, nil
}

// whenRedisTLS passes a variable on when REDIS_URL is set and REDIS_TLS is
// true, as there the files apply only with TLS; isBool marks REDIS_TLS
// itself, whose value is checked as a boolean.
func whenRedisTLS(name string, isBool bool) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		if get("REDIS_URL") == "" {
			return "", false, nil
		}
		on, err := envBool(get, "REDIS_TLS")
		if err != nil || !on {
			return "", false, err
		}
		if isBool {
			return "true", true, nil
		}
		v := get(name)
		return v, v != "", nil
	}
}

// whenRedis passes a variable on when REDIS_URL is set too.
func whenRedis(name string) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		v := get(name)
		return v, v != "" && get("REDIS_URL") != "", nil
	}
}

// useStats reports which of envoyproxy/ratelimit's stats sinks are on:
// none with DISABLE_STATS; statsd unless USE_STATSD is false (its default
// is true) or USE_PROMETHEUS is true without USE_STATSD set (where
// envoyproxy/ratelimit refuses to start); both set true is refused, as
// there.
func useStats(get EnvGet) (statsd, prometheus bool, err error) {
	off, err := envBool(get, "DISABLE_STATS")
	if err != nil || off {
		return false, false, err
	}
	if prometheus, err = envBool(get, "USE_PROMETHEUS"); err != nil {
		return false, false, err
	}
	statsd = !prometheus
	if get("USE_STATSD") != "" {
		if statsd, err = envBool(get, "USE_STATSD"); err != nil {
			return false, false, err
		}
	}
	if statsd && prometheus {
		return false, false, errors.New("USE_STATSD and USE_PROMETHEUS are both true: set one, as envoyproxy/ratelimit requires (USE_STATSD=false for Prometheus)")
	}
	return statsd, prometheus, nil
}

// statsdAddr is STATSD_HOST:STATSD_PORT (localhost:8125) when statsd is
// on, as it is by default there.
func statsdAddr(get EnvGet) (string, bool, error) {
	on, _, err := useStats(get)
	if err != nil || !on {
		return "", false, err
	}
	host, port := cmp.Or(get("STATSD_HOST"), "localhost"), cmp.Or(get("STATSD_PORT"), "8125")
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", false, fmt.Errorf("environment variable STATSD_PORT=%q is not a port number (1 to 65535)", port)
	}
	return net.JoinHostPort(host, port), true, nil
}

// statsdProtocol is gostats' STATSD_PROTOCOL, tcp by default there, when
// statsd is on.
func statsdProtocol(get EnvGet) (string, bool, error) {
	on, _, err := useStats(get)
	if err != nil || !on {
		return "", false, nil // an error is statsdAddr's to report
	}
	switch p := cmp.Or(get("STATSD_PROTOCOL"), "tcp"); p {
	case "tcp", "udp":
		return p, true, nil
	default:
		return "", false, fmt.Errorf("environment variable STATSD_PROTOCOL=%q is not tcp or udp", p)
	}
}

// extraTags turns EXTRA_TAGS ("k1:v1,k2:v2") into --envoy-stats-tags'
// form (k1=v1,k2=v2).
func extraTags(get EnvGet) (string, bool, error) {
	v := get("EXTRA_TAGS")
	if v == "" {
		return "", false, nil
	}
	var pairs []string
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(pair, ":")
		if !ok || k == "" || strings.Contains(val, "=") || strings.Contains(k, "=") {
			return "", false, fmt.Errorf("environment variable EXTRA_TAGS=%q is not key:value pairs separated by commas", v)
		}
		pairs = append(pairs, k+"="+val)
	}
	return strings.Join(pairs, ","), true, nil
}

// whenPrometheus passes a variable on when USE_PROMETHEUS is in force.
func whenPrometheus(name string) func(EnvGet) (string, bool, error) {
	return func(get EnvGet) (string, bool, error) {
		_, on, err := useStats(get)
		if err != nil || !on {
			return "", false, nil // an error is statsdAddr's to report
		}
		v := get(name)
		return v, v != "", nil
	}
}

// prometheusAddr serves envoyproxy/ratelimit's Prometheus series on
// PROMETHEUS_ADDR (default :9090) when USE_PROMETHEUS is true.
func prometheusAddr(get EnvGet) (string, bool, error) {
	_, on, err := useStats(get)
	if err != nil || !on {
		return "", false, nil // an error is statsdAddr's to report
	}
	addr := get("PROMETHEUS_ADDR")
	if addr == "" {
		addr = ":9090"
	}
	return addr, true, nil
}
