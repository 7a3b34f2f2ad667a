package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/accesslog"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/middleware"
)

// Config is a gateway.yaml file. See docs/gateway.md for every field.
type Config struct {
	// Listen is the address to serve on (default ":8081").
	Listen string `yaml:"listen"`
	// AdminListen serves /healthz, /readyz and /metrics, never the public
	// listener, so no upstream path is shadowed and metrics stay private
	// (default 127.0.0.1:9081; a reload cannot change it).
	AdminListen string `yaml:"admin_listen"`
	// Redis is the store URL shared by every gateway instance
	// (redis://, redis-cluster://, redis-sentinel://); empty keeps counters
	// in process, for a single instance. The gateway's caller opens it
	// (sluice gateway does) and hands the store to New.
	Redis string `yaml:"redis"`
	// RedisPrefix is put before every key (default "sluice:").
	RedisPrefix string `yaml:"redis_prefix"`
	// FailureMode is the default of routes that set none (default open).
	FailureMode sluice.FailureMode `yaml:"failure_mode"`
	// StoreTimeout bounds each store call (default 50ms).
	StoreTimeout Duration `yaml:"store_timeout"`
	// Server bounds what one connection may hold of the gateway.
	Server ServerConfig `yaml:"server"`
	// TLS, if set, serves the listener over TLS.
	TLS *TLSConfig `yaml:"tls"`

	// AccessLog, when enabled, logs one record per request.
	AccessLog AccessLogConfig `yaml:"access_log"`

	TrustedProxies TrustedProxiesConfig `yaml:"trusted_proxies"`
	CORS           *CORSConfig          `yaml:"cors"`
	// JWT holds named token verifiers that routes refer to by name.
	JWT    map[string]JWTConfig `yaml:"jwt"`
	Routes []RouteConfig        `yaml:"routes"`
}

// AccessLogConfig turns on the access log: one JSON record per request,
// message "access". Denials, errors and refused credentials (every status
// of 400 and above) are always logged; successful requests are sampled.
type AccessLogConfig struct {
	Enabled bool `yaml:"enabled"`
	// Sample is the fraction, 0 to 1, of successful requests logged
	// (default 0.01).
	Sample *float64 `yaml:"sample"`
}

// sample is the configured fraction, or the default.
func (a AccessLogConfig) sample() float64 {
	if a.Sample == nil {
		return accesslog.DefaultSample
	}
	return *a.Sample
}

// ServerConfig holds the HTTP server's limits. A zero field takes its
// default; none can be switched off, since a proxy without them can be held
// by a few slow or bloated clients. They apply from start: a reload cannot
// change them.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included (default
	// 60s).
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer (default 120s); it must be longer than every route's
	// timeout, or the server would cut off answers the route still allows.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle that long (default
	// 120s).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the request line and headers (default 32 KiB);
	// larger requests get 431.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
}

// TLSConfig names the listener's PEM files. The files are reread when they
// change (see tlsconfig); a reload cannot name other files.
type TLSConfig struct {
	// CertFile holds the certificate, then any intermediates.
	CertFile string `yaml:"cert_file"`
	// KeyFile holds its private key.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, if set, holds the CAs client certificates must chain
	// to: every client must present one (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

func (t *TLSConfig) files() tlsconfig.Files {
	return tlsconfig.Files{Cert: t.CertFile, Key: t.KeyFile, ClientCA: t.ClientCAFile}
}

// tlsField names the field of a file's role, for errors.
func tlsField(role tlsconfig.Role) string {
	switch role {
	case tlsconfig.RoleCert:
		return "tls.cert_file"
	case tlsconfig.RoleKey:
		return "tls.key_file"
	default:
		return "tls.client_ca_file"
	}
}

// tlsError names the field of the file a tlsconfig error is about.
func tlsError(err error) error {
	var fe *tlsconfig.FileError
	if errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", tlsField(fe.Role), err)
	}
	return fmt.Errorf("tls: %w", err)
}

// validate reads the files, so a wrong path or a key that does not match
// is reported at load, like a JWT key file.
func (t *TLSConfig) validate() error {
	if t.CertFile == "" {
		return errors.New("tls.cert_file: the server certificate (PEM) is required; remove the tls section to serve plain HTTP")
	}
	if t.KeyFile == "" {
		return errors.New("tls.key_file: the certificate's private key (PEM) is required with cert_file")
	}
	if _, err := tlsconfig.LoadKeyPair(t.CertFile, t.KeyFile); err != nil {
		return tlsError(err)
	}
	if t.ClientCAFile != "" {
		if _, err := tlsconfig.LoadCAPool(t.ClientCAFile); err != nil {
			return tlsError(err)
		}
	}
	return nil
}

// TrustedProxiesConfig says which proxies may report the client address.
type TrustedProxiesConfig struct {
	CIDRs  []string `yaml:"cidrs"`
	Hops   int      `yaml:"hops"`
	Header string   `yaml:"header"`
}

// CORSConfig is the cross-origin policy for browsers.
type CORSConfig struct {
	// AllowedOrigins is the explicit list of origins allowed to call.
	AllowedOrigins   []string `yaml:"allowed_origins"`
	AllowedMethods   []string `yaml:"allowed_methods"`
	AllowedHeaders   []string `yaml:"allowed_headers"`
	ExposedHeaders   []string `yaml:"exposed_headers"`
	AllowCredentials bool     `yaml:"allow_credentials"`
	MaxAge           Duration `yaml:"max_age"`
}

// JWTConfig verifies bearer tokens.
type JWTConfig struct {
	// Issuer, if set, must equal the token's iss.
	Issuer string `yaml:"issuer"`
	// Audience, if set, must contain one of the token's aud.
	Audience []string `yaml:"audience"`
	// Leeway tolerates clock skew on exp, nbf and iat (default 30s, at most 5m).
	Leeway *Duration `yaml:"leeway"`
	// HS256SecretEnv names the environment variable holding the HS256 secret.
	HS256SecretEnv string `yaml:"hs256_secret_env"`
	// PublicKeys are PEM files of RSA, ECDSA (P-256) or Ed25519 public keys.
	PublicKeys []string `yaml:"public_keys"`
	// JWKSURL is fetched at start and every JWKSRefresh (default 5m), and
	// when a token names a key id not seen yet.
	JWKSURL     string   `yaml:"jwks_url"`
	JWKSRefresh Duration `yaml:"jwks_refresh"`
	// Algorithms restricts the accepted algorithms (default: those of the
	// configured keys: HS256, RS256, ES256, EdDSA).
	Algorithms []string `yaml:"algorithms"`
	// MaxTokenBytes refuses longer bearer tokens with 401 before any
	// verification work (default 8 KiB).
	MaxTokenBytes int `yaml:"max_token_bytes"`
}

// RouteConfig is one proxied route.
type RouteConfig struct {
	// Name names the route in metrics, headers and counters (unique).
	Name string `yaml:"name"`
	// PathPrefix selects requests: "/api/orders" matches /api/orders and
	// /api/orders/17, not /api/ordersx. The longest matching prefix wins.
	PathPrefix string   `yaml:"path_prefix"`
	Methods    []string `yaml:"methods"`
	Upstream   string   `yaml:"upstream"`
	// StripPrefix removes PathPrefix before forwarding.
	StripPrefix bool `yaml:"strip_prefix"`
	// Timeout bounds the whole upstream exchange (default 30s).
	Timeout Duration `yaml:"timeout"`
	// Auth names the JWT verifier requests must pass; empty: no auth.
	Auth string `yaml:"auth"`
	// AuthOptional lets requests without a token through (limited by
	// address); a token that is present must still be valid.
	AuthOptional bool `yaml:"auth_optional"`
	// Limits are the route's rate limits, per JWT subject when authenticated,
	// else per client IP. None: not limited.
	Limits []LimitConfig `yaml:"limits"`
	// Plans are named limit sets a request may be put on instead of
	// Limits, and PlanClaim the verified token's claim that names a
	// request's plan (none, or a request without the claim: Limits; a
	// plan Plans lacks: 400).
	Plans       map[string][]LimitConfig `yaml:"plans"`
	PlanClaim   string                   `yaml:"plan_claim"`
	FailureMode sluice.FailureMode       `yaml:"failure_mode"`
	// Shadow checks and counts the limits but never denies (see
	// middleware.Options.Shadow).
	Shadow bool `yaml:"shadow"`
	// Cost is what one request takes from the limits (default 1). With
	// cost_by: response_bytes it is the estimate reserved before proxying.
	Cost *int64 `yaml:"cost"`
	// Key says what the limits count by (default: the token's sub claim);
	// the client IP when the request lacks it.
	Key *KeyConfig `yaml:"key"`
	// ClaimHeaders passes verified claims upstream: claim name → header.
	// Copies of those headers sent by the client are always removed.
	ClaimHeaders map[string]string `yaml:"claim_headers"`
	// CostBy "response_bytes" charges each request the size of its response
	// body: cost is reserved before proxying, and the hold is settled with
	// the bytes actually sent (see docs/holds.md).
	CostBy string `yaml:"cost_by"`
	// Concurrency caps the requests of one subject in flight on the route
	// at once; each holds a lease until its response is done, or ttl.
	Concurrency *ConcurrencyConfig `yaml:"concurrency"`
}

// ConcurrencyConfig is a route's concurrency limit: at most limit requests
// of a subject in flight, each lease freed at the latest after ttl.
type ConcurrencyConfig struct {
	Limit int64    `yaml:"limit"`
	TTL   Duration `yaml:"ttl"`
}

// CostByResponseBytes is the cost_by that charges the response body's size.
const CostByResponseBytes = "response_bytes"

// concurrencyLimit is the route's concurrency limit, or false without one.
func (r RouteConfig) concurrencyLimit() (sluice.Limit, bool, error) {
	if r.Concurrency == nil {
		return sluice.Limit{}, false, nil
	}
	l := sluice.Concurrency(r.Concurrency.Limit, time.Duration(r.Concurrency.TTL))
	if err := l.Validate(); err != nil {
		return l, false, fmt.Errorf("concurrency: %w", err)
	}
	return l, true, nil
}

// LimitConfig is a limit in the service's JSON shape:
// {name, algorithm: token_bucket, capacity, refill_per_second} or
// {name, algorithm: sliding_window|fixed_window, limit, window}.
type LimitConfig struct {
	Name            string  `yaml:"name"`
	Algorithm       string  `yaml:"algorithm"`
	Capacity        int64   `yaml:"capacity"`
	RefillPerSecond float64 `yaml:"refill_per_second"`
	Limit           int64   `yaml:"limit"`
	Window          Window  `yaml:"window"`
}

// Window is a limit's window in YAML: a duration like "1m", or in days or
// weeks ("1d", "1w"), read by sluice.ParseWindow as everywhere else.
type Window time.Duration

// UnmarshalYAML reads a window.
func (w *Window) UnmarshalYAML(node *yaml.Node) error {
	v, err := decodeDuration(node, `a window like "1m", "1h" or "1d"`, func(s string) (time.Duration, error) {
		v, err := sluice.ParseWindow(s)
		if err != nil {
			return 0, fmt.Errorf("window %w", err)
		}
		return v, nil
	})
	*w = Window(v)
	return err
}

// Duration is a time.Duration written as "30s" or "1m" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	v, err := decodeDuration(node, `a duration like "30s" or "1m"`, func(s string) (time.Duration, error) {
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration like \"30s\" or \"1m\"", s)
		}
		return v, nil
	})
	*d = Duration(v)
	return err
}

// decodeDuration reads a YAML string with parse; errors name the line.
func decodeDuration(node *yaml.Node, expected string, parse func(string) (time.Duration, error)) (time.Duration, error) {
	var s string
	if err := node.Decode(&s); err != nil {
		return 0, fmt.Errorf("line %d: %s is expected", node.Line, expected)
	}
	v, err := parse(s)
	if err != nil {
		return 0, fmt.Errorf("line %d: %w", node.Line, err)
	}
	return v, nil
}

// LoadConfig reads and validates a gateway.yaml file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gateway config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("gateway config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes YAML, rejecting unknown fields, fills defaults and
// validates.
func ParseConfig(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			// Decode's error would be a bare "EOF".
			return nil, errors.New("routes: at least one route is required; the file is empty")
		}
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

const (
	defaultListen       = ":8081"
	defaultRouteTimeout = 30 * time.Second
	defaultLeeway       = 30 * time.Second
	maxLeeway           = 5 * time.Minute
	defaultJWKSRefresh  = 5 * time.Minute

	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 60 * time.Second
	defaultWriteTimeout      = 120 * time.Second
	defaultIdleTimeout       = 120 * time.Second
	defaultMaxHeaderBytes    = 32 << 10
	maxMaxHeaderBytes        = 1 << 20
	minMaxHeaderBytes        = 1 << 10
	defaultMaxTokenBytes     = 8 << 10
	maxMaxTokenBytes         = 1 << 20
)

func (c *Config) fillDefaults() {
	if c.Listen == "" {
		c.Listen = defaultListen
	}
	if c.AdminListen == "" {
		c.AdminListen = defaultAdminListen
	}
	if c.FailureMode == "" {
		c.FailureMode = sluice.FailOpen
	}
	c.Server.fillDefaults()
	if c.CORS != nil {
		// Browsers send Origin without a trailing slash; rs/cors compares
		// strings, so "https://app.example.com/" would never match.
		for i, o := range c.CORS.AllowedOrigins {
			c.CORS.AllowedOrigins[i] = strings.TrimSuffix(o, "/")
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Timeout == 0 {
			r.Timeout = Duration(defaultRouteTimeout)
		}
		if r.FailureMode == "" {
			r.FailureMode = c.FailureMode
		}
		for j := range r.Methods {
			r.Methods[j] = strings.ToUpper(r.Methods[j])
		}
	}
}

func (s *ServerConfig) fillDefaults() {
	for _, d := range []struct {
		field *Duration
		def   time.Duration
	}{
		{&s.ReadHeaderTimeout, defaultReadHeaderTimeout},
		{&s.ReadTimeout, defaultReadTimeout},
		{&s.WriteTimeout, defaultWriteTimeout},
		{&s.IdleTimeout, defaultIdleTimeout},
	} {
		if *d.field == 0 {
			*d.field = Duration(d.def)
		}
	}
	if s.MaxHeaderBytes == 0 {
		s.MaxHeaderBytes = defaultMaxHeaderBytes
	}
}

func (s ServerConfig) validate() error {
	for _, d := range []struct {
		name  string
		value Duration
	}{
		{"read_header_timeout", s.ReadHeaderTimeout},
		{"read_timeout", s.ReadTimeout},
		{"write_timeout", s.WriteTimeout},
		{"idle_timeout", s.IdleTimeout},
	} {
		if d.value < 0 {
			return fmt.Errorf("server.%s: must not be negative (0 or omitted takes the default)", d.name)
		}
	}
	if s.ReadHeaderTimeout > s.ReadTimeout {
		return fmt.Errorf("server.read_header_timeout: %v is longer than read_timeout (%v), which bounds the headers too", time.Duration(s.ReadHeaderTimeout), time.Duration(s.ReadTimeout))
	}
	if s.MaxHeaderBytes < minMaxHeaderBytes || s.MaxHeaderBytes > maxMaxHeaderBytes {
		return fmt.Errorf("server.max_header_bytes: %d is not between %d and %d", s.MaxHeaderBytes, minMaxHeaderBytes, maxMaxHeaderBytes)
	}
	return nil
}

var routeNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

var knownAlgorithms = map[string]bool{"HS256": true, "RS256": true, "ES256": true, "EdDSA": true}

// Validate reports the first problem of c, naming the field.
func (c *Config) Validate() error {
	if !c.FailureMode.Valid() {
		return fmt.Errorf("failure_mode: %q is not one of open, closed, local", c.FailureMode)
	}
	if c.StoreTimeout < 0 {
		return errors.New("store_timeout: must not be negative")
	}
	if err := c.Server.validate(); err != nil {
		return err
	}
	if s := c.AccessLog.sample(); !(s >= 0 && s <= 1) {
		return fmt.Errorf("access_log.sample: must be between 0 and 1 (the fraction of successful requests logged), got %v", s)
	}
	if err := validateAdminListen(c.AdminListen, c.Listen); err != nil {
		return err
	}
	if c.TLS != nil {
		if err := c.TLS.validate(); err != nil {
			return err
		}
	}
	if c.Redis != "" {
		u, err := url.Parse(c.Redis)
		if err != nil || !strings.HasPrefix(u.Scheme, "redis") {
			return errors.New("redis: must be a redis://, rediss://, redis-cluster:// or redis-sentinel:// URL")
		}
	}
	if _, err := c.TrustedProxies.build(); err != nil {
		return fmt.Errorf("trusted_proxies: %w", err)
	}
	if c.CORS != nil {
		if err := c.CORS.validate(); err != nil {
			return err
		}
	}
	for name, j := range c.JWT {
		if err := j.validate(); err != nil {
			return fmt.Errorf("jwt.%s.%w", name, err)
		}
	}
	if len(c.Routes) == 0 {
		return errors.New("routes: at least one route is required")
	}
	names := map[string]bool{}
	prefixes := map[string]string{}
	for i, r := range c.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		if r.Name != "" {
			field = fmt.Sprintf("routes[%d] (%s)", i, r.Name)
		}
		if err := r.validate(c); err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
		if names[r.Name] {
			return fmt.Errorf("%s.name: %q is used by another route; route names must be unique", field, r.Name)
		}
		names[r.Name] = true
		for _, m := range methodsOrAny(r.Methods) {
			key := m + " " + r.PathPrefix
			if other, ok := prefixes[key]; ok {
				return fmt.Errorf("%s.path_prefix: %s %s is already served by route %q", field, m, r.PathPrefix, other)
			}
			prefixes[key] = r.Name
		}
	}
	return nil
}

func methodsOrAny(methods []string) []string {
	if len(methods) == 0 {
		return []string{"*"}
	}
	return methods
}

func (t TrustedProxiesConfig) build() (middleware.TrustedProxies, error) {
	cidrs, err := middleware.ParseCIDRs(t.CIDRs)
	if err != nil {
		return middleware.TrustedProxies{}, fmt.Errorf("cidrs: %w", err)
	}
	tp := middleware.TrustedProxies{CIDRs: cidrs, Hops: t.Hops, Header: t.Header}
	if err := tp.Validate(); err != nil {
		return middleware.TrustedProxies{}, err
	}
	return tp, nil
}

func (c *CORSConfig) validate() error {
	if len(c.AllowedOrigins) == 0 {
		return errors.New("cors.allowed_origins: list the origins allowed to call (like https://app.example.com); remove the cors section to send no CORS headers")
	}
	for i, o := range c.AllowedOrigins {
		if o == "*" {
			if c.AllowCredentials {
				return errors.New("cors.allowed_origins: \"*\" cannot be combined with allow_credentials: true; list the origins explicitly")
			}
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
			return fmt.Errorf("cors.allowed_origins[%d]: %q is not an origin like https://app.example.com", i, o)
		}
		// rs/cors matches a "*" anywhere as "any text": "https://*" would
		// grant every https site, credentials included. Only a leading
		// subdomain wildcard of a named domain is allowed.
		if strings.Contains(u.Host, "*") {
			rest, ok := strings.CutPrefix(u.Host, "*.")
			if !ok || strings.Contains(rest, "*") || !strings.Contains(strings.Trim(rest, "."), ".") {
				return fmt.Errorf("cors.allowed_origins[%d]: %q: a wildcard may only stand for subdomains of a named domain, like https://*.example.com", i, o)
			}
		}
	}
	if c.MaxAge < 0 {
		return errors.New("cors.max_age: must not be negative")
	}
	return nil
}

func (j JWTConfig) validate() error {
	if j.HS256SecretEnv == "" && len(j.PublicKeys) == 0 && j.JWKSURL == "" {
		return errors.New("hs256_secret_env: a verifier needs a key: hs256_secret_env, public_keys or jwks_url")
	}
	if j.HS256SecretEnv != "" && len(os.Getenv(j.HS256SecretEnv)) < 32 {
		return fmt.Errorf("hs256_secret_env: environment variable %s must hold a secret of at least 32 bytes", j.HS256SecretEnv)
	}
	if j.JWKSURL != "" {
		u, err := url.Parse(j.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("jwks_url: %q is not an http(s) URL", j.JWKSURL)
		}
	}
	if j.JWKSRefresh < 0 || (j.JWKSRefresh > 0 && time.Duration(j.JWKSRefresh) < time.Second) {
		return errors.New("jwks_refresh: must be at least 1s")
	}
	if j.Leeway != nil && (*j.Leeway < 0 || time.Duration(*j.Leeway) > maxLeeway) {
		return fmt.Errorf("leeway: must be between 0 and %v", maxLeeway)
	}
	if j.MaxTokenBytes < 0 || j.MaxTokenBytes > maxMaxTokenBytes {
		return fmt.Errorf("max_token_bytes: %d is not between 0 (the default, %d) and %d", j.MaxTokenBytes, defaultMaxTokenBytes, maxMaxTokenBytes)
	}
	for i, a := range j.Algorithms {
		if !knownAlgorithms[a] {
			return fmt.Errorf("algorithms[%d]: %q is not one of HS256, RS256, ES256, EdDSA", i, a)
		}
	}
	for i, path := range j.PublicKeys {
		if _, err := readPublicKey(path); err != nil {
			return fmt.Errorf("public_keys[%d]: %w", i, err)
		}
	}
	return nil
}

func (r RouteConfig) validate(c *Config) error {
	if !routeNamePattern.MatchString(r.Name) {
		return fmt.Errorf("name: %q must be 1-64 letters, digits, '_', '.' or '-'", r.Name)
	}
	if !strings.HasPrefix(r.PathPrefix, "/") {
		return fmt.Errorf("path_prefix: %q must start with /", r.PathPrefix)
	}
	// Requests are matched on their cleaned path: a prefix that is not clean
	// could never match, and one with encodings would be refused anyway.
	if pathProblem(r.PathPrefix) != "" {
		return fmt.Errorf("path_prefix: %q holds a backslash, an encoded slash or an encoded dot segment, for which requests are refused", r.PathPrefix)
	}
	if clean := cleanPath(r.PathPrefix); clean != r.PathPrefix {
		return fmt.Errorf("path_prefix: %q is not a clean path ('.' or '..' segments, repeated slashes); write %q", r.PathPrefix, clean)
	}
	for i, m := range r.Methods {
		if !regexp.MustCompile(`^[A-Z]+$`).MatchString(m) {
			return fmt.Errorf("methods[%d]: %q is not an HTTP method", i, m)
		}
	}
	u, err := url.Parse(r.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("upstream: %q must be an absolute http:// or https:// URL", r.Upstream)
	}
	// The base path is what forwarded paths are kept under, so it must
	// mean the same thing to every reader.
	if (u.Path != "" && cleanPath(u.Path) != u.Path) || pathProblem(u.EscapedPath()) != "" || pathProblem(u.Path) != "" {
		return fmt.Errorf("upstream: the base path of %q is not a clean path (no '.' or '..' segments, repeated slashes, backslashes, or encoded slashes)", r.Upstream)
	}
	if r.Timeout < 0 {
		return errors.New("timeout: must not be negative")
	}
	if r.Timeout >= c.Server.WriteTimeout {
		return fmt.Errorf("timeout: %v is not shorter than server.write_timeout (%v), which would cut the answer off before the upstream's or the gateway's 504; raise server.write_timeout", time.Duration(r.Timeout), time.Duration(c.Server.WriteTimeout))
	}
	if r.Auth != "" {
		if _, ok := c.JWT[r.Auth]; !ok {
			return fmt.Errorf("auth: no verifier %q under jwt", r.Auth)
		}
	} else if r.AuthOptional {
		return errors.New("auth_optional: needs auth to name a verifier")
	}
	if !r.FailureMode.Valid() {
		return fmt.Errorf("failure_mode: %q is not one of open, closed, local", r.FailureMode)
	}
	if r.Key != nil {
		if err := r.Key.validate(r.Auth); err != nil {
			return err
		}
	}
	if err := validateClaimHeaders(r.ClaimHeaders, r.Auth); err != nil {
		return err
	}
	limits, err := r.limits()
	if err != nil {
		return err
	}
	if _, err := r.plans(); err != nil {
		return err
	}
	if _, _, err := r.concurrencyLimit(); err != nil {
		return err
	}
	switch r.CostBy {
	case "":
	case CostByResponseBytes:
		if r.Cost == nil {
			return errors.New("cost_by: response_bytes needs cost, the most a response is expected to weigh, to reserve before proxying")
		}
	default:
		return fmt.Errorf("cost_by: %q is not a cost; the one offered is response_bytes", r.CostBy)
	}
	if r.Cost != nil {
		if len(limits) == 0 {
			return errors.New("cost: the route has no limits")
		}
		if err := (sluice.Request{Limits: limits, Cost: *r.Cost}).Validate(); err != nil {
			return fmt.Errorf("cost: %w", err)
		}
	}
	return nil
}

// limits maps the route's limit configs onto sluice.Limits.
func (r RouteConfig) limits() ([]sluice.Limit, error) {
	return toLimits("limits", r.Limits)
}

// plans are the route's plans, or nil without any.
func (r RouteConfig) plans() (sluice.Plans, error) {
	if len(r.Plans) == 0 {
		if r.PlanClaim != "" {
			return nil, errors.New("plan_claim: names a plan, and the route has no plans")
		}
		return nil, nil
	}
	if len(r.Limits) == 0 {
		return nil, errors.New("plans: a route with plans needs limits too, for requests that name no plan")
	}
	if r.PlanClaim != "" && r.Auth == "" {
		return nil, errors.New("plan_claim: claims come from a verified token, which needs auth to name a verifier")
	}
	out := make(sluice.Plans, len(r.Plans))
	for name, lcs := range r.Plans {
		if len(lcs) == 0 {
			return nil, fmt.Errorf("plans.%s: a plan needs at least one limit", name)
		}
		ls, err := toLimits("plans."+name, lcs)
		if err != nil {
			return nil, err
		}
		out[name] = ls
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	return out, nil
}

// toLimits reads the limits of field.
func toLimits(field string, lcs []LimitConfig) ([]sluice.Limit, error) {
	if len(lcs) == 0 {
		return nil, nil
	}
	out := make([]sluice.Limit, len(lcs))
	for i, lc := range lcs {
		l := sluice.Limit{Name: lc.Name, Algorithm: sluice.Algorithm(lc.Algorithm)}
		switch l.Algorithm {
		case sluice.AlgorithmTokenBucket:
			if lc.Limit != 0 || lc.Window != 0 {
				return nil, fmt.Errorf("%s[%d]: a token bucket takes capacity and refill_per_second, not limit and window", field, i)
			}
			l.Capacity, l.RefillPerSecond = lc.Capacity, lc.RefillPerSecond
		default:
			if lc.Capacity != 0 || lc.RefillPerSecond != 0 {
				return nil, fmt.Errorf("%s[%d]: a %s limit takes limit and window, not capacity and refill_per_second", field, i, lc.Algorithm)
			}
			l.Capacity, l.Window = lc.Limit, time.Duration(lc.Window)
		}
		out[i] = l
	}
	if err := sluice.Limits(out).Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return out, nil
}
