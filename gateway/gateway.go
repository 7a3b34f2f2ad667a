// Package gateway is a small API gateway: a reverse proxy whose routes
// authenticate bearer JWTs, answer CORS for an explicit list of origins, and
// rate-limit each caller with Sluice.
//
// A request goes through, in order: CORS (preflights are answered here and
// never reach auth or limits; every answer, 401 and 429 included, carries the
// CORS headers so browsers can read it), path normalisation (dot segments and
// repeated slashes resolved; encoded dots and slashes refused with 400),
// route matching (longest path prefix of the cleaned path),
// authentication (401 unless the route's JWT verifier accepts the bearer
// token), rate limiting (keyed by the token's subject, or the route's chosen
// verified claim or API-key header, else by the client IP found through the
// trusted proxies), and the reverse proxy (which passes the route's selected
// verified claims upstream as headers, after removing the client's copies).
// Authentication comes before limiting so that callers are limited as
// themselves, not by the address they share with others. Health and metrics
// are served by AdminHandler, on a listener of their own.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/cors"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/accesslog"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/middleware"
	"github.com/sluicelabs/sluice/ratelimitheader"
	"github.com/sluicelabs/sluice/tracing"
)

// Options are the gateway's process-wide dependencies.
type Options struct {
	// Store holds every route's counters (required): the store the
	// config's redis field names (Redis, or in process when empty), opened
	// by the caller, who closes it after the Gateway. A Store with a
	// Ping(context.Context) error method is pinged by /readyz.
	Store sluice.Store
	// Metrics receives decisions under source "gateway"; may be nil.
	Metrics *metrics.Metrics
	// Gatherer serves /metrics; nil serves prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Requests, if set, counts answers per route and status class and
	// times upstream exchanges.
	Requests *metrics.GatewayRequests
	// Tracing, if on, gives every request a server span (child of the
	// caller's trace context), every check a span, and passes the trace
	// context upstream.
	Tracing *tracing.Tracing
}

// Gateway is an http.Handler serving a Config; Reload swaps the config
// without dropping requests.
type Gateway struct {
	opts Options
	// redis and redisPrefix name the store of the first config, the one
	// the caller opened: a reload cannot change them.
	redis, redisPrefix string
	// engine checks every route's limits: one breaker and deny cache for
	// the one store, kept across reloads. storeTimeout is its deadline.
	engine       *check.Engine
	storeTimeout Duration
	// server holds the limits NewServer gave the listener, and tls its
	// TLS files; a reload cannot change them.
	server ServerConfig
	tls    *TLSConfig

	mu      sync.Mutex // serialises Reload and Close
	current atomic.Pointer[runtime]
	// handler is ServeHTTP's, traced when tracing is on.
	handler http.Handler
	// adminListen is the admin listener's address; a reload cannot change it.
	adminListen string
	// authLog logs refused credentials, throttled across reloads.
	authLog *authFailureLog
}

// New returns a Gateway serving cfg with the counters of opts.Store. Close
// releases what it started; the store stays the caller's.
func New(cfg *Config, opts Options) (*Gateway, error) {
	if opts.Store == nil {
		return nil, errors.New("gateway: Options.Store is required: open the store the config names (redis, or memory when it names none) and pass it")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	g := &Gateway{opts: opts, redis: cfg.Redis, redisPrefix: cfg.RedisPrefix, storeTimeout: cfg.StoreTimeout, server: cfg.Server, tls: cfg.TLS,
		adminListen: cfg.AdminListen, authLog: &authFailureLog{log: opts.Logger, throttle: accesslog.NewThrottle()}}
	g.handler = opts.Tracing.Handler(http.HandlerFunc(g.serve), "sluice-gateway")
	g.engine = check.New(opts.Store, check.Options{
		Guard:          guard.Options{Name: "gateway", Timeout: time.Duration(cfg.StoreTimeout)},
		Metrics:        opts.Metrics,
		TracerProvider: opts.Tracing.TracerProvider(),
	})
	rt, err := g.build(cfg)
	if err != nil {
		g.engine.Close()
		return nil, err
	}
	g.current.Store(rt)
	return g, nil
}

// Reload replaces the configuration. If cfg cannot be served (a JWT key file
// gone, a changed store), the running configuration stays and the error says
// why.
func (g *Gateway) Reload(cfg *Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cfg.Redis != g.redis {
		return errors.New("redis: the store cannot change on reload; restart the gateway to use another")
	}
	// Accepting a new prefix without reopening the store would report a
	// reload that did not happen: counters would stay under the old one.
	if cfg.Redis != "" && cfg.RedisPrefix != g.redisPrefix {
		return fmt.Errorf("redis_prefix: the key prefix cannot change on reload (%q → %q); restart the gateway to use another", g.redisPrefix, cfg.RedisPrefix)
	}
	if cfg.StoreTimeout != g.storeTimeout {
		return fmt.Errorf("store_timeout: the store deadline cannot change on reload (%v → %v); restart the gateway to use another", time.Duration(g.storeTimeout), time.Duration(cfg.StoreTimeout))
	}
	if cfg.Server != g.server {
		return errors.New("server: the server limits cannot change on reload; restart the gateway to use new ones")
	}
	// The listener was started with TLS or without, on given files: a
	// reload naming others would report a change that did not happen. The
	// files' contents need no reload: they are reread when they change.
	if cfg.AdminListen != g.adminListen {
		return fmt.Errorf("admin_listen: the address cannot change on reload (%s → %s); restart the gateway", g.adminListen, cfg.AdminListen)
	}
	if !sameTLS(cfg.TLS, g.tls) {
		return errors.New("tls: the TLS section cannot change on reload; replace the contents of the files instead (they are reread within seconds), or restart the gateway")
	}
	rt, err := g.build(cfg)
	if err != nil {
		return err
	}
	old := g.current.Swap(rt)
	// Series of routes the new configuration no longer has are removed.
	for _, r := range old.routes {
		if rt.route(r.cfg.Name) == nil {
			g.opts.Metrics.DropRule(metrics.SourceGateway, "", "", r.cfg.Name)
			g.opts.Requests.DropRoute(r.cfg.Name)
		}
	}
	// In-flight requests of the old runtime keep working: closing only
	// stops JWKS refreshes and fallback stores' sweepers.
	old.close()
	return nil
}

// Close stops background work. It does not close the store, which the
// caller owns.
func (g *Gateway) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if rt := g.current.Load(); rt != nil {
		rt.close()
	}
	return g.engine.Close()
}

func sameTLS(a, b *TLSConfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// NewServer returns an http.Server serving h with the limits of cfg.Server:
// without them a few clients that send slowly, read slowly or send huge
// headers hold the gateway's connections and memory. With cfg.TLS, its
// TLSConfig serves the files of cfg.TLS, reread when they change: serve it
// with ServeTLS(ln, "", ""). logger (nil: slog.Default()) gets the server's
// errors and the certificate reloads.
func NewServer(cfg *Config, h http.Handler, logger *slog.Logger) (*http.Server, error) {
	if logger == nil {
		logger = slog.Default()
	}
	s := cfg.Server
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: time.Duration(s.ReadHeaderTimeout),
		ReadTimeout:       time.Duration(s.ReadTimeout),
		WriteTimeout:      time.Duration(s.WriteTimeout),
		IdleTimeout:       time.Duration(s.IdleTimeout),
		MaxHeaderBytes:    s.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if cfg.TLS != nil {
		r, err := tlsconfig.New(cfg.TLS.files(), tlsconfig.Options{Logger: logger})
		if err != nil {
			return nil, tlsError(err)
		}
		srv.TLSConfig = r.ServerConfig("h2", "http/1.1")
	}
	return srv, nil
}

// Listen returns the listen address of the running configuration.
func (g *Gateway) Listen() string { return g.current.Load().cfg.Listen }

// AdminListen returns the admin listener's address.
func (g *Gateway) AdminListen() string { return g.adminListen }

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	g.current.Load().handler.ServeHTTP(w, r)
}

// AdminHandler serves /healthz, /readyz and /metrics, for the admin
// listener: never on the public one, where they would shadow the upstreams'
// own paths and publish the metrics.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", g.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.opts.Gatherer, promhttp.HandlerOpts{}))
	return mux
}

// readyPingTimeout bounds the store ping of one /readyz.
const readyPingTimeout = 500 * time.Millisecond

// handleReady answers whether the gateway can answer as its routes say: the
// store answers, or every limited route's failure mode (open, local) covers
// its absence. The body says the store's state: "ok", "unavailable", or
// "connecting" (not connected since the start, being connected to).
func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	state := "ok"
	if p, ok := g.opts.Store.(interface{ Ping(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(r.Context(), readyPingTimeout)
		err := p.Ping(ctx)
		cancel()
		switch {
		case errors.Is(err, sluice.ErrStoreConnecting):
			state = "connecting"
		case err != nil:
			state = "unavailable"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if state != "ok" {
		var closed []string
		for _, rte := range g.current.Load().routes {
			if rte.checked && rte.cfg.FailureMode == sluice.FailClosed {
				closed = append(closed, rte.cfg.Name)
			}
		}
		if len(closed) > 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "not_ready", "store": state,
				"reason": fmt.Sprintf("the rate-limit store is %s and %d routes fail closed", state, len(closed)), "routes_fail_closed": closed})
			return
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "ready", "store": state})
}

// runtime is everything built from one Config.
type runtime struct {
	cfg       *Config
	handler   http.Handler
	routes    []*route // longest prefix first
	verifiers map[string]*verifier
	limiters  []*middleware.Limiter
	transport *http.Transport
	cancel    context.CancelFunc
	// unmatched counts answers to requests no route matched.
	unmatched *metrics.GatewayRoute
}

type route struct {
	cfg      RouteConfig
	methods  []string
	verifier *verifier
	limiter  *middleware.Limiter
	// limited is the proxy behind the route's limiters' handlers: they
	// hold leases and reservations for the whole proxied exchange.
	limited  http.Handler
	proxy    *httputil.ReverseProxy
	timeout  time.Duration
	requests *metrics.GatewayRoute
	// checked says the route has limits, rate or concurrency.
	checked bool
	authLog *authFailureLog
}

func (g *Gateway) build(cfg *Config) (rt *runtime, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	rt = &runtime{cfg: cfg, verifiers: map[string]*verifier{}, cancel: cancel}
	defer func() {
		if err != nil {
			rt.close()
		}
	}()
	trusted, err := cfg.TrustedProxies.build()
	if err != nil {
		return nil, fmt.Errorf("trusted_proxies: %w", err)
	}
	for name, jc := range cfg.JWT {
		v, err := newVerifier(ctx, name, jc, g.opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("jwt.%s: %w", name, err)
		}
		rt.verifiers[name] = v
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	rt.transport = transport
	rt.unmatched = g.opts.Requests.Route(metrics.RouteUnmatched)
	for _, rc := range cfg.Routes {
		upstream, _ := url.Parse(rc.Upstream) // validated
		rte := &route{cfg: rc, methods: rc.Methods, verifier: rt.verifiers[rc.Auth], timeout: time.Duration(rc.Timeout), requests: g.opts.Requests.Route(rc.Name), authLog: g.authLog}
		limits, err := rc.limits()
		if err != nil {
			return nil, fmt.Errorf("routes (%s).%w", rc.Name, err)
		}
		if len(limits) > 0 {
			cost := int64(1)
			if rc.Cost != nil {
				cost = *rc.Cost
			}
			plans, err := rc.plans()
			if err != nil {
				return nil, fmt.Errorf("routes (%s).%w", rc.Name, err)
			}
			opts := middleware.Options{
				Store:       g.opts.Store,
				Name:        rc.Name,
				Tenant:      "gateway",
				Limits:      limits,
				Plans:       plans,
				Key:         rc.keyFunc(trusted),
				Cost:        func(*http.Request) int64 { return cost },
				FailureMode: rc.FailureMode,
				Shadow:      rc.Shadow,
				Engine:      g.engine,
				Metrics:     g.opts.Metrics,
				Source:      metrics.SourceGateway,
			}
			if rc.PlanClaim != "" {
				opts.Plan = middleware.JWTClaim(rc.PlanClaim)
			}
			if rc.CostBy == CostByResponseBytes {
				opts.Reserve = true
				opts.Settle = func(_ *http.Request, f middleware.Finished) int64 { return min(f.Bytes, maxCost(limits)) }
			}
			rte.limiter, err = middleware.NewLimiter(opts)
			if err != nil {
				return nil, fmt.Errorf("routes (%s): %w", rc.Name, err)
			}
			rt.limiters = append(rt.limiters, rte.limiter)
		}
		rte.limited = http.HandlerFunc(rte.proxyWithTimeout)
		if rte.limiter != nil {
			rte.limited = rte.limiter.Handler(rte.limited)
		}
		if cl, ok, err := rc.concurrencyLimit(); err != nil {
			return nil, fmt.Errorf("routes (%s).%w", rc.Name, err)
		} else if ok {
			// A lease weighs its check's cost, so the concurrency limit is a
			// limiter of its own, of cost 1, in front of the rate limits: a
			// request they deny gives its lease back at once.
			conc, err := middleware.NewLimiter(middleware.Options{
				Store: g.opts.Store, Name: rc.Name + ".concurrency", Tenant: "gateway",
				Limits: []sluice.Limit{cl.Named("inflight")}, Key: rc.keyFunc(trusted), FailureMode: rc.FailureMode,
				Engine: g.engine, Metrics: g.opts.Metrics, Source: metrics.SourceGateway,
			})
			if err != nil {
				return nil, fmt.Errorf("routes (%s): %w", rc.Name, err)
			}
			rt.limiters = append(rt.limiters, conc)
			rte.limited = conc.Handler(rte.limited)
			rte.checked = true
		}
		rte.checked = rte.checked || rte.limiter != nil
		rte.proxy = newProxy(upstream, rc, trusted, cfg.CORS != nil, g.opts.Tracing.Transport(transport), g.opts.Logger)
		rt.routes = append(rt.routes, rte)
	}
	sort.SliceStable(rt.routes, func(i, j int) bool {
		return len(rt.routes[i].cfg.PathPrefix) > len(rt.routes[j].cfg.PathPrefix)
	})

	// Paths are cleaned first, so routes are matched on the path the
	// upstream will get; CORS wraps the lot, so a browser can read a 400 too.
	rt.handler = normalisePaths(http.HandlerFunc(rt.serveRoute))
	if cfg.CORS != nil {
		rt.handler = newCORSPolicy(cfg.CORS, g.opts.Logger).Handler(rt.handler)
	}
	// Outermost, so that preflights and refused paths are logged too.
	if cfg.AccessLog.Enabled {
		rt.handler = accessLog(rt.handler, g.opts.Logger, cfg.AccessLog.sample())
	}
	return rt, nil
}

// route returns the route named name, or nil.
func (rt *runtime) route(name string) *route {
	for _, r := range rt.routes {
		if r.cfg.Name == name {
			return r
		}
	}
	return nil
}

func newCORS(c *CORSConfig, methods, headers []string) *cors.Cors {
	// The rate-limit headers are exposed to browsers, so scripts can read
	// their limits.
	exposed := append(ratelimitheader.Names(), c.ExposedHeaders...)
	return cors.New(cors.Options{
		AllowedOrigins:   c.AllowedOrigins,
		AllowedMethods:   methods,
		AllowedHeaders:   headers,
		ExposedHeaders:   exposed,
		AllowCredentials: c.AllowCredentials,
		MaxAge:           int(time.Duration(c.MaxAge).Seconds()),
	})
}

func (rt *runtime) close() {
	rt.cancel()
	for _, v := range rt.verifiers {
		v.close()
	}
	for _, l := range rt.limiters {
		l.Close()
	}
	if rt.transport != nil {
		// Only idle connections: requests still in flight finish.
		rt.transport.CloseIdleConnections()
	}
}

// match returns the route for r: the longest path prefix matching at a
// segment boundary, and whether a route had the path but not the method.
func (rt *runtime) match(r *http.Request) (*route, []string) {
	var allowed []string
	for _, rte := range rt.routes {
		if !pathHasPrefix(r.URL.Path, rte.cfg.PathPrefix) {
			continue
		}
		if len(rte.methods) == 0 || slices.Contains(rte.methods, r.Method) ||
			(r.Method == http.MethodHead && slices.Contains(rte.methods, http.MethodGet)) {
			return rte, nil
		}
		allowed = append(allowed, rte.methods...)
	}
	return nil, allowed
}

func pathHasPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || strings.HasSuffix(prefix, "/") || path[len(prefix)] == '/'
}

func (rt *runtime) serveRoute(w http.ResponseWriter, r *http.Request) {
	rte, allowed := rt.match(r)
	if rte == nil {
		defer rt.unmatched.Answered(http.StatusNotFound) // 404 or 405: both 4xx
		if len(allowed) > 0 {
			slices.Sort(allowed)
			w.Header().Set("Allow", strings.Join(slices.Compact(allowed), ", "))
			middleware.WriteProblem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on this path.", r.Method), 0)
			return
		}
		middleware.WriteProblem(w, http.StatusNotFound, "No route matches this path.", 0)
		return
	}
	nameSpan(r, rte)
	if ex := exchangeFrom(r.Context()); ex != nil {
		ex.route = rte.cfg.Name
	}
	if rte.requests != nil {
		sw := &statusWriter{}
		w = sw.wrap(w)
		defer func() { rte.requests.Answered(sw.code()) }()
		rte.serve(w, r, sw)
		return
	}
	rte.serve(w, r, nil)
}

// serve authenticates, limits and proxies a request of the route; sw, when
// set, is w's status recorder, for the upstream's timing.
func (rte *route) serve(w http.ResponseWriter, r *http.Request, sw *statusWriter) {
	if rte.verifier != nil {
		var ok bool
		if r, ok = authenticate(w, r, rte); !ok {
			return
		}
	}
	if ex := exchangeFrom(r.Context()); ex != nil {
		ex.checked = rte.checked
	}
	if sw != nil {
		// The limiters' handlers wrap w on the way to the proxy, so the
		// recorder of the answer's status travels with the request.
		r = r.WithContext(context.WithValue(r.Context(), statusWriterKey{}, sw))
	}
	rte.limited.ServeHTTP(w, r)
}

// statusWriterKey is the request context key of the route's statusWriter.
type statusWriterKey struct{}

// proxyWithTimeout forwards r upstream within the route's timeout, timing
// the upstream's answer when the route counts its requests.
func (rte *route) proxyWithTimeout(w http.ResponseWriter, r *http.Request) {
	if rte.timeout > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), rte.timeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	sw, _ := r.Context().Value(statusWriterKey{}).(*statusWriter)
	ex := exchangeFrom(r.Context())
	if sw == nil && ex == nil {
		rte.proxy.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	rte.proxy.ServeHTTP(w, r)
	took := time.Since(start)
	if sw != nil {
		rte.requests.Upstream(sw.code(), took)
	}
	if ex != nil {
		ex.proxied, ex.upstream = true, took
	}
}

// maxCost is the largest cost every rate limit of limits can hold: a
// response bigger than that is charged that much (a settle, like a check,
// must fit every limit).
func maxCost(limits []sluice.Limit) int64 {
	c := limits[0].Capacity
	for _, l := range limits[1:] {
		c = min(c, l.Capacity)
	}
	return c
}

// authenticate verifies the bearer token and stores its claims for the
// limiter. On failure it answers 401 and returns false.
func authenticate(w http.ResponseWriter, r *http.Request, rte *route) (*http.Request, bool) {
	raw, present := bearerToken(r)
	if !present {
		if rte.cfg.AuthOptional {
			return r, true
		}
		rte.authLog.record(r, rte, "missing")
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-gateway"`)
		middleware.WriteProblem(w, http.StatusUnauthorized, "A bearer token is required: send Authorization: Bearer <JWT>.", 0)
		return r, false
	}
	if len(raw) > rte.verifier.maxTokenBytes {
		// Refused before parsing: decoding and verifying a token costs in
		// proportion to its size, and no identity provider issues these.
		rte.authLog.record(r, rte, "too_large")
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-gateway", error="invalid_token"`)
		middleware.WriteProblem(w, http.StatusUnauthorized, fmt.Sprintf("The bearer token was rejected: it is %d bytes, over the %d this gateway accepts.", len(raw), rte.verifier.maxTokenBytes), 0)
		return r, false
	}
	claims, err := rte.verifier.verify(r.Context(), raw)
	if err != nil {
		// The reason (expired, wrong audience...) helps the caller fix its
		// token; the token itself is never echoed or logged.
		reason, words := tokenProblem(err)
		rte.authLog.record(r, rte, reason)
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-gateway", error="invalid_token"`)
		middleware.WriteProblem(w, http.StatusUnauthorized, "The bearer token was rejected: "+words+".", 0)
		return r, false
	}
	return r.WithContext(middleware.WithClaims(r.Context(), map[string]any(claims))), true
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true // present but not a bearer token: rejected
	}
	return strings.TrimSpace(token), true
}

// newProxy forwards to upstream. ownsCORS says the gateway answers CORS
// itself, so the upstream's CORS headers are dropped.
func newProxy(upstream *url.URL, rc RouteConfig, trusted middleware.TrustedProxies, ownsCORS bool, transport http.RoundTripper, log *slog.Logger) *httputil.ReverseProxy {
	claimHeaders := newClaimHeaders(rc.ClaimHeaders)
	return &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			if len(claimHeaders) > 0 {
				claims, _ := middleware.ClaimsFrom(pr.In.Context())
				setClaimHeaders(pr.Out.Header, claims, claimHeaders)
			}
			// The path is rebuilt from the cleaned request path, never
			// joined as received: it stays under the upstream's base path,
			// and RawPath is left empty so it is encoded from Path.
			pr.Out.URL.Path = forwardedPath(upstream.Path, pr.In.URL.Path, rc.PathPrefix, rc.StripPrefix)
			pr.Out.URL.RawPath = ""
			pr.SetXForwarded()
			// Tell the upstream the path the gateway can vouch for: the
			// client it believes, the trusted proxies that reported it, and
			// its own peer; never entries an untrusted client wrote itself.
			// An upstream that trusts the gateway and the proxies in front
			// of it then finds the same client.
			if chain, ok := trusted.Chain(pr.In); ok {
				hops := make([]string, len(chain))
				for i, a := range chain {
					hops[i] = a.String()
				}
				pr.Out.Header.Set("X-Forwarded-For", strings.Join(hops, ", "))
			}
			// Behind a trusted load balancer that terminates TLS, the
			// scheme and host the client used are the balancer's to tell:
			// an upstream told "http" for an https request redirects in a
			// loop or builds wrong links.
			if trusted.TrustsPeer(pr.In) {
				if proto := lastValue(pr.In.Header.Values("X-Forwarded-Proto")); proto == "http" || proto == "https" {
					pr.Out.Header.Set("X-Forwarded-Proto", proto)
				}
				if host := lastValue(pr.In.Header.Values("X-Forwarded-Host")); host != "" && validHost(host) {
					pr.Out.Header.Set("X-Forwarded-Host", host)
				}
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if ownsCORS {
				// The gateway has already answered CORS for this request;
				// the upstream's own Access-Control-* headers would be
				// added to the gateway's, and a browser refuses a response
				// with two Access-Control-Allow-Origin values.
				for name := range resp.Header {
					if strings.HasPrefix(name, "Access-Control-") {
						delete(resp.Header, name)
					}
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.DeadlineExceeded) {
				middleware.WriteProblem(w, http.StatusGatewayTimeout, "The upstream did not answer in time.", 0)
				return
			}
			if r.Context().Err() == nil {
				log.Warn("upstream request failed", "route", rc.Name, "error", err)
			}
			middleware.WriteProblem(w, http.StatusBadGateway, "The upstream could not be reached.", 0)
		},
	}
}

// lastValue is the right-most element of a comma-separated header: the one
// the nearest proxy wrote.
func lastValue(values []string) string {
	if len(values) == 0 {
		return ""
	}
	v := values[len(values)-1]
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return strings.ToLower(strings.TrimSpace(v))
}

// validHost accepts a host[:port] made of the characters a Host header may
// hold, so nothing else is passed on as one.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte(".-:[]_", c) >= 0) {
			return false
		}
	}
	return true
}

// tokenProblems say why a token was refused: a short reason for the log,
// and words for the caller. The first that matches wins.
var tokenProblems = []struct {
	errs          []error
	reason, words string
}{
	{[]error{jwt.ErrTokenMalformed}, "malformed", "it is not a well-formed JWT"},
	{[]error{jwt.ErrTokenSignatureInvalid, jwt.ErrTokenUnverifiable}, "signature", "its signature or algorithm is not accepted"},
	{[]error{jwt.ErrTokenExpired}, "expired", "it has expired"},
	{[]error{jwt.ErrTokenNotValidYet}, "not_yet_valid", "it is not valid yet"},
	{[]error{jwt.ErrTokenUsedBeforeIssued}, "issued_in_future", "it was issued in the future"},
	{[]error{jwt.ErrTokenInvalidIssuer}, "issuer", "its issuer is not accepted"},
	{[]error{jwt.ErrTokenInvalidAudience}, "audience", "it is not meant for this audience"},
	{[]error{jwt.ErrTokenRequiredClaimMissing}, "missing_claim", "a required claim (exp) is missing"},
}

// tokenProblem says why a token was refused: a reason for the log, and
// words for the caller.
func tokenProblem(err error) (reason, words string) {
	for _, p := range tokenProblems {
		for _, e := range p.errs {
			if errors.Is(err, e) {
				return p.reason, p.words
			}
		}
	}
	return "invalid", "it is not valid"
}
