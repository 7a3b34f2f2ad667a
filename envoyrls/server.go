package envoyrls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/ratelimitheader"
)

// Options configure a Server.
type Options struct {
	// Engine decides each check (deny cache, guard, store, shadow and
	// metrics); required.
	Engine *check.Engine
	// Metrics, if set, is where the series of rules gone from a reloaded
	// configuration are removed from; pass the Engine's.
	Metrics *metrics.Metrics
	// Logger receives reload and error reports; slog.Default() when nil.
	Logger *slog.Logger
	// ResponseHeaders adds rate-limit headers to response_headers_to_add
	// (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED), in
	// HeaderStyle.
	ResponseHeaders bool
	// HeaderStyle is HeaderStyleEnvoy (the default) or HeaderStyleIETF.
	HeaderStyle HeaderStyle
	// HeaderLimit, HeaderRemaining and HeaderReset rename the headers of
	// HeaderStyleEnvoy (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
	// LIMIT_RESET_HEADER); "" keeps RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset.
	HeaderLimit, HeaderRemaining, HeaderReset string
	// Shadow answers OK whatever the descriptors' statuses say, as
	// envoyproxy/ratelimit's SHADOW_MODE: the statuses and the metrics
	// (shadow_denied) still tell what would have been denied.
	Shadow bool
	// DynamicMetadata returns the request's domain and descriptors, and the
	// metadata of the rules it passed, as the response's dynamic_metadata
	// (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA).
	DynamicMetadata bool
	// Load says how Watch reads the configuration directory.
	Load LoadOptions
	// Clock dates the answers decided without the store (time to the end
	// of a fixed window); default time.Now. Tests give the store's clock.
	Clock func() time.Time
	// RatelimitKeys counts default fixed windows under envoyproxy/ratelimit's
	// Redis keys, for a store wrapped in a RatelimitKeyStore (see there).
	RatelimitKeys bool
	// StopIncrementWhenOverLimit is envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, for descriptors that count
	// every hit (CountingEnvoy): when one descriptor of a request would go
	// over its limit, the request's hits are counted only in those that
	// would; the others only look. It costs a look at every such
	// descriptor before the count, as there.
	StopIncrementWhenOverLimit bool
	// ServeBeforeConfig reports health SERVING before the first
	// configuration arrives (envoyproxy/ratelimit's
	// FORCE_START_WITHOUT_INITIAL_CONFIG), so probes pass and Envoy's own
	// failure_mode_deny decides the calls, which are answered UNAVAILABLE
	// until then. Default: NOT_SERVING until a configuration is in force.
	ServeBeforeConfig bool
	// Counting is how the hits of domains that do not say (counting: in
	// their YAML) count: CountingStrict when "", CountingEnvoy in ENV mode.
	Counting Counting
	// Stats, if set, counts every call and decision under
	// envoyproxy/ratelimit's stat names (see EnvStats).
	Stats *EnvStats
}

// HeaderStyle names the set of response headers Options.ResponseHeaders adds.
type HeaderStyle string

const (
	// HeaderStyleEnvoy: envoyproxy/ratelimit's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (seconds), renamable.
	HeaderStyleEnvoy HeaderStyle = "envoy"
	// HeaderStyleIETF: the headers Sluice's HTTP API writes: the IETF
	// RateLimit-Policy and RateLimit fields, X-RateLimit-Limit, -Remaining
	// and -Reset, and Retry-After on a deny.
	HeaderStyleIETF HeaderStyle = "ietf"
)

// Valid reports whether s is a known style ("" is the default, envoy).
func (s HeaderStyle) Valid() bool {
	return s == "" || s == HeaderStyleEnvoy || s == HeaderStyleIETF
}

// CheckHeaders checks the header style and names of o before a Server is
// made: a typo in a header name would otherwise reach every response.
// Errors name the sluice serve flags of the fields.
func (o Options) CheckHeaders() error {
	if !o.HeaderStyle.Valid() {
		return fmt.Errorf("--envoy-header-style %q is not one of envoy, ietf", o.HeaderStyle)
	}
	for _, h := range []struct{ flag, name string }{{"--envoy-header-limit", o.HeaderLimit}, {"--envoy-header-remaining", o.HeaderRemaining}, {"--envoy-header-reset", o.HeaderReset}} {
		if h.name != "" && !validHeaderName(h.name) {
			return fmt.Errorf("%s %q is not a valid HTTP header name", h.flag, h.name)
		}
	}
	return nil
}

// validHeaderName reports whether name is an HTTP field name (a token).
func validHeaderName(name string) bool {
	return name != "" && strings.IndexFunc(name, func(r rune) bool {
		return r > 0x7e || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r)
	}) < 0
}

// Server answers Envoy's ShouldRateLimit. It is safe for concurrent use, and
// its configuration can be swapped while it serves.
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer
	engine          *check.Engine
	metrics         *metrics.Metrics
	log             *slog.Logger
	responseHeaders bool
	headerStyle     HeaderStyle
	headerNames     [3]string // limit, remaining, reset
	shadow          bool
	dynamicMetadata bool
	load            LoadOptions
	clock           func() time.Time
	ratelimitKeys   bool
	defaultCounting Counting
	// serveBeforeConfig is Options.ServeBeforeConfig.
	serveBeforeConfig bool
	stopIncrement     bool
	mu                sync.Mutex // serialises SetConfig
	config            atomic.Pointer[compiled]
	health            *health.Server
	// unknownDomain counts the descriptors of domains no file defines.
	unknownDomain *check.Scope
	// stats counts under envoyproxy/ratelimit's names; nil counts nothing.
	stats *EnvStats
}

// compiled is a Config with every rule as the engine checks it. A reloaded
// configuration is compiled afresh, so its rules are new to the deny cache.
type compiled struct {
	cfg     *Config
	domains map[string]*compiledDomain
}

type compiledDomain struct {
	rules map[*Rule]*check.Rule
	// scope counts the domain's descriptors that match no rule.
	scope *check.Scope
	// joint is the engine rule of an all_or_nothing domain's joint checks.
	joint *check.Rule
	// overrides holds the engine rules of descriptors that carry their own
	// limit, made on first use: one per distinct limit.
	overridesMu sync.Mutex
	overrides   map[overrideKey]override
	// stats are the rules' envoyproxy/ratelimit counters (nil without
	// Options.Stats).
	stats map[*Rule]*ruleStats
}

type overrideKey struct {
	requestsPerUnit, multiplier uint32
	unit                        rlspb.RateLimitResponse_RateLimit_Unit
}

// NewServer returns a Server with no configuration: it answers UNAVAILABLE
// until SetConfig is called.
func NewServer(opts Options) *Server {
	if opts.Engine == nil {
		// A programming error: every caller passes the process's engine.
		panic("envoyrls: Options.Engine is required")
	}
	s := &Server{
		engine:            opts.Engine,
		metrics:           opts.Metrics,
		log:               opts.Logger,
		responseHeaders:   opts.ResponseHeaders,
		headerStyle:       opts.HeaderStyle,
		headerNames:       [3]string{cmp.Or(opts.HeaderLimit, "RateLimit-Limit"), cmp.Or(opts.HeaderRemaining, "RateLimit-Remaining"), cmp.Or(opts.HeaderReset, "RateLimit-Reset")},
		shadow:            opts.Shadow,
		dynamicMetadata:   opts.DynamicMetadata,
		load:              opts.Load,
		clock:             opts.Clock,
		ratelimitKeys:     opts.RatelimitKeys,
		defaultCounting:   opts.Counting,
		serveBeforeConfig: opts.ServeBeforeConfig,
		stopIncrement:     opts.StopIncrementWhenOverLimit,
		health:            health.NewServer(),
		unknownDomain:     opts.Engine.NewScope(metrics.Labels{Source: metrics.SourceEnvoy}),
		stats:             opts.Stats,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	s.setServing(s.serveBeforeConfig)
	return s
}

// SetConfig replaces the configuration; requests in flight finish with the
// one they started with. Metric series of rules the new configuration no
// longer has are removed.
func (s *Server) SetConfig(cfg *Config) { s.setConfig(cfg, true) }

// setConfig is SetConfig; counted says a load is counted in the stats
// (config_load_success), which the watcher's first look, repeating its
// caller's load, is not.
func (s *Server) setConfig(cfg *Config, counted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next *compiled
	if cfg != nil {
		next = s.compile(cfg)
	}
	old := s.config.Swap(next)
	if cfg != nil && counted {
		s.stats.configLoaded(nil)
	}
	if old != nil {
		s.dropGoneSeries(old.cfg, cfg)
	}
	s.setServing(cfg != nil || s.serveBeforeConfig)
}

// compile makes the engine rules of every rule of cfg.
func (s *Server) compile(cfg *Config) *compiled {
	c := &compiled{cfg: cfg, domains: map[string]*compiledDomain{}}
	for _, d := range cfg.domains {
		cd := &compiledDomain{
			rules:     map[*Rule]*check.Rule{},
			scope:     s.engine.NewScope(metrics.Labels{Source: metrics.SourceEnvoy, Domain: d.Name}),
			overrides: map[overrideKey]override{},
		}
		if s.stats != nil {
			cd.stats = map[*Rule]*ruleStats{}
		}
		for _, r := range d.Rules() {
			cd.rules[r] = s.engineRule(d, r)
			if s.stats != nil && !r.Unlimited {
				cd.stats[r] = s.stats.ruleStats(fullKey(d.Name, r.Path))
			}
		}
		if d.AllOrNothing {
			cd.joint = s.engine.NewRule(metrics.Labels{Source: metrics.SourceEnvoy, Domain: d.Name, Rule: allOrNothingRule},
				check.Rule{Namespace: tenant(d), Name: allOrNothingRule, Mode: d.FailureMode})
		}
		c.domains[d.Name] = cd
	}
	return c
}

func (s *Server) engineRule(d *Domain, r *Rule) *check.Rule {
	limits := r.limits()
	if s.countsZeroLimit(d, r) {
		// The store is asked to count; the engine needs a limit to ask
		// with, and the answer is the rule's (see zeroLimitAnswer).
		limits[0].Capacity = 1
	}
	return s.engine.NewRule(metrics.Labels{Source: metrics.SourceEnvoy, Domain: d.Name, Rule: r.Path},
		check.Rule{Namespace: tenant(d), Name: r.Path, Limits: limits, Plans: r.enginePlans(), Mode: r.FailureMode, Shadow: r.Shadow || s.shadow})
}

// PlanKey is the key of the descriptor entry that names a request's plan
// (a Sluice extension): the entry is not matched against the descriptor
// tree; its value picks one of the matched descriptor's plans.
const PlanKey = "sluice_plan"

// planOf splits a descriptor's entries into those matched against the
// tree and the plan a PlanKey entry names ("" without one, or with an
// empty value). Only a descriptor with a plan entry is copied.
func planOf(entries []*ratelimitv3.RateLimitDescriptor_Entry) ([]*ratelimitv3.RateLimitDescriptor_Entry, string, error) {
	at := -1
	for i, e := range entries {
		if e.GetKey() == PlanKey {
			if at >= 0 {
				return nil, "", fmt.Errorf("two %s entries (%q and %q); a descriptor names one plan", PlanKey, entries[at].GetValue(), e.GetValue())
			}
			at = i
		}
	}
	if at < 0 {
		return entries, "", nil
	}
	rest := make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, len(entries)-1)
	rest = append(append(rest, entries[:at]...), entries[at+1:]...)
	return rest, entries[at].GetValue(), nil
}

// countsZeroLimit says whether d counts the hits of r, a rule of
// requests_per_unit: 0, under envoyproxy/ratelimit's keys, as it does:
// with counting envoy, every hit is counted although none is admitted, so
// a look (hits_addend 0) after one in the window is over the limit.
func (s *Server) countsZeroLimit(d *Domain, r *Rule) bool {
	return s.ratelimitKeys && !d.AllOrNothing && s.counting(d) == CountingEnvoy && !r.Unlimited &&
		r.Limit.Capacity == 0 && r.Limit.Algorithm == sluice.AlgorithmFixedWindow && r.UnitMultiplier == 1 && len(r.Also) == 0
}

// zeroLimitAnswer turns the store's answer for a rule of
// requests_per_unit: 0 counted with a stand-in limit of 1 into the rule's:
// a hit is over the limit; a look is OK while nothing was counted in the
// window (the stand-in has one left), over once anything was; none
// remains either way.
func (s *Server) zeroLimitAnswer(it *item, res *check.Result, ld *sluice.LimitDecision) {
	allowed := it.cost == 0 && ld.Remaining > 0 && ld.Allowed
	ld.Limit, ld.Remaining, ld.Allowed = 0, 0, allowed
	if !allowed {
		ld.RetryAfter = ld.ResetAfter
		if res.Decision.Allowed && !res.Shadowed {
			// The store had room in the stand-in: the rule denies.
			if it.rule.Shadow || s.shadow {
				res.Shadowed = true
			} else {
				res.Decision.Allowed = false
			}
		}
	}
}

// dropGoneSeries removes the metric series of the domains and rules that
// next no longer has.
func (s *Server) dropGoneSeries(old, next *Config) {
	for _, d := range old.domains {
		var nd *Domain
		if next != nil {
			nd = next.Domain(d.Name)
		}
		if nd == nil {
			s.metrics.DropRule(metrics.SourceEnvoy, "", d.Name, "")
			continue
		}
		paths := map[string]bool{allOrNothingRule: nd.AllOrNothing, overrideRulePath: true}
		for _, r := range nd.Rules() {
			paths[r.Path] = true
		}
		for _, r := range d.Rules() {
			if !paths[r.Path] {
				s.metrics.DropRule(metrics.SourceEnvoy, "", d.Name, r.Path)
			}
		}
		if d.AllOrNothing && !nd.AllOrNothing {
			s.metrics.DropRule(metrics.SourceEnvoy, "", d.Name, allOrNothingRule)
		}
	}
}

// Config returns the configuration in force.
func (s *Server) Config() *Config {
	if c := s.config.Load(); c != nil {
		return c.cfg
	}
	return nil
}

// Register registers the rate limit service and gRPC health checking on gs.
// Health reports SERVING (overall, for the rate limit service, and as
// "ratelimit") once a configuration is loaded.
func (s *Server) Register(gs *grpc.Server) {
	rlspb.RegisterRateLimitServiceServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
}

// Shutdown marks the service NOT_SERVING, so health-checking clients move
// away before the listener closes.
func (s *Server) Shutdown() { s.health.Shutdown() }

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range healthServices {
		s.health.SetServingStatus(name, st)
	}
}

// healthServices are the service names gRPC health checking answers for: the
// server as a whole (""), the rate limit service, and "ratelimit", the name
// envoyproxy/ratelimit reports, so probes written for it keep working.
var healthServices = []string{"", rlspb.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

// item is one request descriptor on its way to a status.
type item struct {
	// rule is the matched rule, or the plan of it the request named.
	rule  *Rule
	check *check.Rule
	// plan is the plan the request named ("": none).
	plan     string
	subject  string
	cost     int64
	replaced bool
	// countsAll says the descriptor counts every hit, past the limit
	// too (CountingEnvoy under envoyproxy/ratelimit's keys).
	countsAll bool
	status    *rlspb.RateLimitResponse_DescriptorStatus
	// decision holds the descriptor's figures for the response headers.
	decision *sluice.LimitDecision
	// stats are the rule's envoyproxy/ratelimit counters, if counted.
	stats *ruleStats
	// storeFailed says the store could not decide the descriptor.
	storeFailed bool
}

// ShouldRateLimit decides a request: each descriptor gets its own status, and
// the overall code is OVER_LIMIT if any descriptor is over its limit.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	var storeFailed, globalShadow bool
	resp, err := s.shouldRateLimit(ctx, req, start, &storeFailed, &globalShadow)
	s.stats.call(start, storeFailed, err, globalShadow)
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest, start time.Time, storeFailed, globalShadow *bool) (*rlspb.RateLimitResponse, error) {
	c := s.config.Load()
	if c == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration is loaded yet")
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "the rate limit domain must not be empty")
	}
	if err := validateRequest(req); err != nil {
		return nil, err
	}
	domain := c.cfg.Domain(req.GetDomain())
	cd := c.domains[req.GetDomain()]
	var one [1]item // the common case, without a slice allocation
	items := one[:]
	if n := len(req.GetDescriptors()); n > 1 {
		items = make([]item, n)
	}
	for i, desc := range req.GetDescriptors() {
		it := &items[i]
		it.cost = hitsOf(req, desc)
		if domain == nil {
			s.stats.domainNotFound(req.GetDomain())
		}
		entries, plan, err := planOf(desc.GetEntries())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
		}
		if domain == nil || len(entries) == 0 {
			// No entries match no rule: OK, as in envoyproxy/ratelimit.
			continue
		}
		if desc.GetLimit() != nil {
			rule, engineRule, err := cd.overrideRule(s, domain, desc)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			it.rule, it.subject, it.check = rule, overrideSubject(entries), engineRule
			if s.stats != nil {
				it.stats = s.stats.keyStats(descriptorKey(req.GetDomain(), desc))
			}
			continue
		}
		if m, ok := domain.Match(entries); ok {
			it.rule, it.check = m.Rule, cd.rules[m.Rule]
			if plan != "" {
				// Refused before any store call, so a request naming an
				// unknown plan consumes nothing in its other descriptors;
				// the engine's own plans say which there are.
				if _, err := it.check.Plans.Limits(nil, plan); err != nil {
					return nil, status.Errorf(codes.InvalidArgument, "domain %q, descriptor %d (%s): %v", domain.Name, i, m.Rule.Path, err)
				}
				it.rule, it.plan = m.Rule.Plans[plan], plan
			}
			it.subject, it.countsAll = s.keySubject(domain, it.rule, entries, m.Subject, &it.cost)
			it.stats = cd.stats[m.Rule]
			if m.Rule.DetailedMetric && s.stats != nil {
				it.stats = s.stats.keyStats(detailedMetricKey(req.GetDomain(), desc))
			}
		}
	}
	markReplaced(items)
	if s.stats != nil {
		// total_hits counts before the store is asked, as there: a call
		// the store fails counts too.
		for i := range items {
			if it := &items[i]; it.stats != nil && !it.replaced {
				it.stats.totalHits.Add(uint64(max(it.cost, 0)))
			}
		}
	}

	var err error
	if domain != nil && domain.AllOrNothing {
		err = s.checkAllOrNothing(ctx, domain, cd, items, start)
	} else {
		err = s.checkEach(ctx, domain, cd, items, start)
	}
	for i := range items {
		*storeFailed = *storeFailed || items[i].storeFailed
	}
	if err != nil {
		return nil, err
	}

	resp := &rlspb.RateLimitResponse{OverallCode: overallCode(items), Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items))}
	for i := range items {
		resp.Statuses[i] = items[i].status
	}
	if s.responseHeaders && s.headerStyle != HeaderStyleIETF {
		resp.ResponseHeadersToAdd = s.envoyHeaders(items)
	}
	if s.shadow && resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		// The descriptors' statuses still say what would have been denied.
		resp.OverallCode = rlspb.RateLimitResponse_OK
		*globalShadow = true
	}
	if s.responseHeaders && s.headerStyle == HeaderStyleIETF {
		resp.ResponseHeadersToAdd = responseHeaders(items, resp.OverallCode == rlspb.RateLimitResponse_OK)
	}
	if s.dynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, items)
	}
	return resp, nil
}

// overallCode is OVER_LIMIT when a descriptor is, as in envoyproxy/ratelimit,
// except that quota-mode descriptors count only together: they make the
// request OVER_LIMIT when every one of them is.
func overallCode(items []item) rlspb.RateLimitResponse_Code {
	quota, quotaOver := 0, 0
	for i := range items {
		over := items[i].status.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT
		if r := items[i].rule; r != nil && r.QuotaMode && !r.Unlimited && !items[i].replaced {
			quota++
			if over {
				quotaOver++
			}
			continue
		}
		if over {
			return rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if quota > 0 && quota == quotaOver {
		return rlspb.RateLimitResponse_OVER_LIMIT
	}
	return rlspb.RateLimitResponse_OK
}

// hitsOf is the cost of a descriptor: its own hits_addend if set (even 0),
// else the request's, where 0 means 1, as in envoyproxy/ratelimit.
func hitsOf(req *rlspb.RateLimitRequest, desc *ratelimitv3.RateLimitDescriptor) int64 {
	if desc.GetIsNegativeHits() {
		// Sluice never gives quota back; a refill only looks.
		return 0
	}
	if h := desc.GetHitsAddend(); h != nil {
		return int64(h.GetValue()) // at most MaxHitsAddend (validateRequest)
	}
	return int64(max(1, req.GetHitsAddend()))
}

// markReplaced drops the rules that another matched rule replaces, as
// envoyproxy/ratelimit does: they answer OK without a limit.
func markReplaced(items []item) {
	var replaced map[string]bool
	for _, it := range items {
		if it.rule == nil {
			continue
		}
		for _, name := range it.rule.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	for i := range items {
		if r := items[i].rule; r != nil && r.Name != "" && replaced[r.Name] {
			items[i].replaced = true
		}
	}
}

// overrideRulePath is the rule (counters and metrics) of every descriptor
// that carries its own limit. It cannot be a descriptor path, which never
// starts with '*'.
const overrideRulePath = "*override"

// overrideRule is the rule of a descriptor that carries its own limit
// (Envoy's limit override): a fixed window of the given size, counted per
// distinct descriptor. Rules are made once per distinct limit, so the deny
// cache can answer them.
func (cd *compiledDomain) overrideRule(s *Server, d *Domain, desc *ratelimitv3.RateLimitDescriptor) (*Rule, *check.Rule, error) {
	o := desc.GetLimit()
	unit := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	name := strings.ToLower(unit.String())
	secs, ok := unitSeconds[name]
	if !ok {
		return nil, nil, fmt.Errorf("the limit override has unknown unit %v", o.GetUnit())
	}
	multiplier := uint32(1)
	if o.GetUnitMultiplier() != nil {
		multiplier = max(1, o.GetUnitMultiplier().GetValue())
	}
	key := overrideKey{requestsPerUnit: o.GetRequestsPerUnit(), multiplier: multiplier, unit: unit}
	cd.overridesMu.Lock()
	defer cd.overridesMu.Unlock()
	if ov, ok := cd.overrides[key]; ok {
		return ov.rule, ov.check, nil
	}
	if len(cd.overrides) >= maxOverrideRules {
		// The limits are the caller's to choose; each is remembered.
		return nil, nil, fmt.Errorf("more than %d distinct limit overrides in domain %q; use fewer distinct limits", maxOverrideRules, d.Name)
	}
	window := time.Duration(secs) * time.Duration(multiplier) * time.Second
	r := &Rule{Path: overrideRulePath, RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, UnitMultiplier: multiplier, FailureMode: d.FailureMode}
	r.Limit = sluice.Limit{Name: "per_" + name, Algorithm: sluice.AlgorithmFixedWindow, Window: window}
	if r.RequestsPerUnit > 0 {
		r.Limit = sluice.FixedWindow(int64(r.RequestsPerUnit), window).Named("per_" + name)
		if err := r.Limit.Validate(); err != nil {
			return nil, nil, err
		}
	}
	ov := override{rule: r, check: s.engineRule(d, r)}
	cd.overrides[key] = ov
	return ov.rule, ov.check, nil
}

type override struct {
	rule  *Rule
	check *check.Rule
}

// maxOverrideRules bounds the distinct override limits remembered per domain.
const maxOverrideRules = 1024

func overrideSubject(entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var subject strings.Builder
	for _, e := range entries {
		for _, part := range []string{e.GetKey(), e.GetValue()} {
			subject.WriteString(strconv.Itoa(len(part)))
			subject.WriteByte(':')
			subject.WriteString(part)
		}
	}
	return subject.String()
}

// tenant namespaces a domain's counters apart from the HTTP service's tenants.
func tenant(d *Domain) string { return "envoy:" + d.Name }

// maxConcurrentChecks bounds the store calls one request makes at once.
const maxConcurrentChecks = 16

// checkEach decides every descriptor on its own, as envoyproxy/ratelimit
// does. The store calls run concurrently, so a request with several limited
// descriptors waits about one round trip, not one per descriptor.
func (s *Server) checkEach(ctx context.Context, d *Domain, cd *compiledDomain, items []item, start time.Time) error {
	// Room for the common case of one descriptor, so it allocates nothing
	// here: pending stays on the stack as long as nothing keeps it.
	var room [1]*item
	pending := room[:0]
	for i := range items {
		if !s.decideWithoutStore(cd, &items[i], start) {
			pending = append(pending, &items[i])
		}
	}
	if s.stopIncrement {
		if err := s.holdBackIncrements(ctx, d, cd, pending, start); err != nil {
			return overLimitDespite(ctx, items, err)
		}
	}
	switch len(pending) {
	case 0:
		return nil
	case 1:
		return overLimitDespite(ctx, items, s.checkOne(ctx, d, cd, pending[0], start))
	}
	return overLimitDespite(ctx, items, s.checkConcurrently(ctx, d, cd, slices.Clone(pending), start))
}

// checkConcurrently checks pending's items at once, at most
// maxConcurrentChecks store calls in flight, and returns the first error.
// pending is its own: the workers share it.
func (s *Server) checkConcurrently(ctx context.Context, d *Domain, cd *compiledDomain, pending []*item, start time.Time) error {
	errs := make([]error, len(pending))
	var wg sync.WaitGroup
	// A bounded number of workers: a request's descriptors (up to
	// MaxDescriptors) must not become as many goroutines and simultaneous
	// store calls.
	var next atomic.Int64
	for range min(len(pending), maxConcurrentChecks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(pending) {
					return
				}
				errs[i] = s.checkOne(ctx, d, cd, pending[i], start)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// overLimitDespite keeps a request that is over the limit over the limit when
// some other descriptor's store check failed: an error would let Envoy apply
// its failure_mode_deny, by default admitting a request that a descriptor
// decided without the store (such as a blocked value) denies. The descriptors
// that could not be decided answer UNKNOWN.
func overLimitDespite(ctx context.Context, items []item, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if c := status.Code(err); c != codes.Unavailable && c != codes.ResourceExhausted {
		return err
	}
	over := false
	for i := range items {
		if st := items[i].status; st != nil && st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			over = true
		}
	}
	if !over {
		return err
	}
	for i := range items {
		if items[i].status == nil {
			items[i].status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_UNKNOWN, CurrentLimit: currentLimit(items[i].rule)}
		}
	}
	return nil
}

// checkOne decides one descriptor on its own.
func (s *Server) checkOne(ctx context.Context, d *Domain, cd *compiledDomain, it *item, start time.Time) error {
	if done := s.decideWithoutStore(cd, it, start); done {
		return nil
	}
	res, err := s.engine.Check(ctx, check.Query{Rule: it.check, Plan: it.plan, Subject: it.subject, Cost: it.cost, Start: start})
	zeroLimit := it.countsAll && it.rule.Limit.Capacity == 0
	if zeroLimit && it.cost > 0 && (err != nil || res.Outcome == check.Degraded) {
		// A hit of a rule that admits none is over the limit, counted or
		// not: answered as without Redis, not by the failure mode.
		it.countsAll = false
		s.decideWithoutStore(cd, it, start)
		return nil
	}
	if err != nil {
		return s.checkFailed(ctx, d, []*item{it}, it.rule.FailureMode, err)
	}
	ld := reportedLimit(res.Decision.Limits)
	if zeroLimit && res.Outcome != check.Degraded {
		s.zeroLimitAnswer(it, &res, &ld)
	}
	s.setStatus(it, res, ld)
	return nil
}

// reportedLimit is the limit a descriptor's status reports: the first that
// denied, else the one with the least remaining (with several limits on
// one descriptor, the closest to denying).
func reportedLimit(limits []sluice.LimitDecision) sluice.LimitDecision {
	var ld sluice.LimitDecision
	for i, l := range limits {
		if !l.Allowed {
			return l
		}
		if i == 0 || l.Remaining < ld.Remaining {
			ld = l
		}
	}
	return ld
}

// decideWithoutStore answers the descriptors that need no store call: no
// rule, a replaced or unlimited rule, requests_per_unit 0, or a cost that can
// never fit (denied, as envoyproxy/ratelimit does, rather than an error that
// Envoy might let through). The engine counts them like any other decision.
func (s *Server) decideWithoutStore(cd *compiledDomain, it *item, start time.Time) bool {
	r := it.rule
	switch {
	case r == nil:
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if cd != nil {
			cd.scope.NoRule(start)
		} else {
			s.unknownDomain.NoRule(start)
		}
	case it.replaced:
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	case r.Unlimited:
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		s.engine.Decided(it.check, start, sluice.Decision{Allowed: true})
	case r.neverFits(it.cost) != nil && !it.countsAll:
		// Over the limit whatever the counters say (requests_per_unit: 0,
		// or a cost above the limit), so the store is not asked; the answer
		// is what it would have said: reset at the end of the window.
		over := r.neverFits(it.cost)
		window := ruleWindow(over)
		reset := untilWindowEnd(over, s.clock())
		ld := sluice.LimitDecision{Name: over.Limit.Name, Algorithm: over.Limit.Algorithm, Limit: over.Limit.Capacity, Window: window, ResetAfter: reset, RetryAfter: window}
		res := s.engine.Decided(it.check, start, sluice.Decision{Limits: []sluice.LimitDecision{ld}, Limit: ld.Limit, ResetAfter: reset, RetryAfter: window})
		s.setStatus(it, res, ld)
	case r.Limit.Capacity == 0 && !it.countsAll:
		// requests_per_unit: 0 with hits 0: a look at a limit that admits
		// nothing. The engine has no empty limit to ask, and there is
		// nothing to count: OK with none remaining, as envoyproxy/ratelimit
		// answers.
		window := ruleWindow(r)
		reset := untilWindowEnd(r, s.clock())
		ld := sluice.LimitDecision{Allowed: true, Name: r.Limit.Name, Algorithm: r.Limit.Algorithm, Window: window, ResetAfter: reset}
		res := s.engine.Decided(it.check, start, sluice.Decision{Allowed: true, Limits: []sluice.LimitDecision{ld}, ResetAfter: reset})
		s.setStatus(it, res, ld)
	default:
		return false
	}
	return true
}

// untilWindowEnd is the time from now to the end of the rule's window: for
// a fixed window (aligned to the Unix epoch) its end by this instance's
// clock, as the store would have answered; the other algorithms have no
// window end, so their whole period stands in.
func untilWindowEnd(r *Rule, now time.Time) time.Duration {
	w := ruleWindow(r)
	if r.Limit.Algorithm != sluice.AlgorithmFixedWindow || w <= 0 {
		return w
	}
	ms := w.Milliseconds()
	return time.Duration(ms-now.UnixMilli()%ms) * time.Millisecond
}

// wholeSeconds is d rounded up to whole seconds, as envoyproxy/ratelimit
// answers duration_until_reset (the seconds from now, a whole second, to the
// end of the window): Envoy copies only the seconds into x-ratelimit-reset,
// so a fraction would read as a second too few, or 0.
func wholeSeconds(d time.Duration) *durationpb.Duration {
	return &durationpb.Duration{Seconds: int64((d + time.Second - 1) / time.Second)}
}

// ruleWindow is the period a rule's quota refers to; a token bucket of
// requests_per_unit: 0 has no refill rate, so its unit's length stands in.
func ruleWindow(r *Rule) time.Duration {
	if r.Limit.Algorithm == sluice.AlgorithmTokenBucket && r.Limit.Capacity > 0 {
		return sluice.PolicyWindow(r.Limit)
	}
	return r.Limit.Window
}

// setStatus sets a decided descriptor's status from the engine's answer:
// OVER_LIMIT when denied. A shadow_mode descriptor is never denied (the
// engine has turned its deny, the store's or a local fallback's, into an
// allow, counted as shadow_denied or degraded); under the service-wide
// SHADOW_MODE the statuses still say what would have been denied, and only
// the overall code is OK (see ShouldRateLimit).
func (s *Server) setStatus(it *item, res check.Result, ld sluice.LimitDecision) {
	s.setLimitStatus(it, res.Decision.Allowed, res.Shadowed, ld)
	if res.Outcome == check.Degraded {
		it.storeFailed = true
		return
	}
	s.countDecided(it, ld.Allowed && res.Decision.Allowed && !res.Shadowed, res.Cached, ld)
}

// countDecided counts a decided descriptor in its rule's
// envoyproxy/ratelimit stats.
func (s *Server) countDecided(it *item, allowed, cached bool, ld sluice.LimitDecision) {
	if it.stats == nil || it.replaced {
		return
	}
	s.stats.decided(it.stats, it.cost, it.rule.RequestsPerUnit, ld.Limit-ld.Remaining, allowed, cached, it.rule.Shadow)
}

// setLimitStatus is setStatus for one limit of a joint check: allowed is
// that limit's answer.
func (s *Server) setLimitStatus(it *item, allowed, shadowed bool, ld sluice.LimitDecision) {
	r := it.rule
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		Code:         rlspb.RateLimitResponse_OK,
		CurrentLimit: currentLimit(r.shown(ld.Name)),
	}
	if !allowed || shadowed && !r.Shadow {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if len(ld.Name) > 0 || ld.Limit > 0 {
		st.LimitRemaining = uint32(min(max(ld.Remaining, 0), math.MaxUint32))
		st.DurationUntilReset = wholeSeconds(ld.ResetAfter)
		ld.Name = policyName(r)
		if shadowed && r.Shadow {
			// The client is let through, so its headers must not say no.
			ld.Allowed, ld.RetryAfter = true, 0
		}
		it.decision = &ld
	}
	it.status = st
}

// checkFailed handles a check the engine could not decide: a shed check is
// RESOURCE_EXHAUSTED; with no failure_mode configured, a store failure fails
// the whole call with UNAVAILABLE and Envoy's own failure_mode_deny decides,
// as with envoyproxy/ratelimit; an explicit "closed" answers OVER_LIMIT for
// the affected descriptors.
func (s *Server) checkFailed(ctx context.Context, d *Domain, its []*item, mode sluice.FailureMode, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, sluice.ErrInvalid) {
		return status.Errorf(codes.InvalidArgument, "domain %q: %v", d.Name, err)
	}
	if errors.Is(err, check.ErrOverloaded) {
		return status.Error(codes.ResourceExhausted, "this rate limit service is past its capacity and sheds requests; retry shortly")
	}
	for _, it := range its {
		it.storeFailed = true
	}
	if mode == "" || !errors.Is(err, sluice.ErrStoreUnavailable) {
		s.log.Debug("envoy rate limit check failed", "domain", d.Name, "error", err)
		return status.Errorf(codes.Unavailable, "rate limit store unavailable: %v", err)
	}
	for _, it := range its {
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OVER_LIMIT, CurrentLimit: currentLimit(it.rule)}
	}
	return nil
}

// allOrNothingRule names the counters of an all-or-nothing domain. It cannot
// be a descriptor path, which never starts with '*'.
const allOrNothingRule = "*all_or_nothing"

// checkAllOrNothing decides every limited descriptor of the request in one
// store check: allowed only if all allow, and a deny consumes nothing in any.
// The counters of an all-or-nothing domain share one key tag (the domain), so
// the one check is atomic on a single Redis node and on a Redis Cluster; each
// counter is told apart by a limit name derived from its descriptor path and
// values. Shadow-mode descriptors are checked on their own, so they never
// deny the others. The joint check is one decision, counted under the rule
// "*all_or_nothing", and its denies are remembered by the deny cache under
// the set of counters it named.
func (s *Server) checkAllOrNothing(ctx context.Context, d *Domain, cd *compiledDomain, items []item, start time.Time) error {
	var (
		joint []*item
		// span[j] are the indexes in limits of joint[j]'s limits.
		span     [][2]int
		limits   []sluice.Limit
		subject  strings.Builder
		byName   = map[string]int{}
		dupOf    = map[*item]int{}
		cost     = int64(-1)
		neverFit bool
	)
	for i := range items {
		it := &items[i]
		r := it.rule
		if r == nil || it.replaced || r.Unlimited || r.Shadow {
			if err := s.checkOne(ctx, d, cd, it, start); err != nil {
				return err
			}
			continue
		}
		if cost >= 0 && it.cost != cost {
			return status.Errorf(codes.InvalidArgument, "domain %q checks all descriptors together (all_or_nothing), so they need the same hits_addend; got %d and %d", d.Name, cost, it.cost)
		}
		cost = it.cost
		if r.neverFits(it.cost) != nil || r.Limit.Capacity == 0 {
			// Decided without the store: a cost that can never fit (which
			// denies the whole request), or a requests_per_unit: 0 rule,
			// which the engine cannot check.
			neverFit = neverFit || r.neverFits(it.cost) != nil
			s.decideWithoutStore(cd, it, start)
			continue
		}
		name := jointLimitName(r.Path, it.subject)
		if j, ok := byName[name]; ok {
			// The same counter twice in one request is counted once.
			dupOf[it] = j
			continue
		}
		byName[name] = len(joint)
		joint = append(joint, it)
		from := len(limits)
		for k, l := range r.limits() {
			if k > 0 {
				// Each further limit of the descriptor is a counter of its own.
				name = jointLimitName(r.Path+"|"+l.Name, it.subject)
			}
			l.Name = name
			limits = append(limits, l)
			subject.WriteString(name)
			subject.WriteByte(' ')
		}
		span = append(span, [2]int{from, len(limits)})
	}
	if len(joint) == 0 {
		return nil
	}
	if len(limits) > sluice.MaxLimits {
		return status.Errorf(codes.InvalidArgument, "domain %q checks all descriptors together (all_or_nothing), which takes at most %d limited descriptors, got %d", d.Name, sluice.MaxLimits, len(limits))
	}
	if neverFit {
		// Something can never fit, so the whole request is denied; nothing
		// is consumed, and the others only look.
		cost = 0
	}
	res, err := s.engine.Check(ctx, check.Query{Rule: cd.joint, Limits: limits, CacheSubject: subject.String(), Cost: cost, Start: start})
	if err != nil {
		return overLimitDespite(ctx, items, s.checkFailed(ctx, d, joint, d.FailureMode, err))
	}
	dec := res.Decision
	for j, it := range joint {
		var ld sluice.LimitDecision
		allowed := dec.Allowed && !neverFit
		if from, to := span[j][0], span[j][1]; to <= len(dec.Limits) {
			ld = reportedLimit(dec.Limits[from:to])
			if !allowed && ld.Allowed {
				// This descriptor had room, but another denied the
				// request; it is not the one over the limit.
				allowed = true
			}
			// The status shows the descriptor's own limit of that name.
			if k := slices.IndexFunc(dec.Limits[from:to], func(l sluice.LimitDecision) bool { return l.Name == ld.Name }); k > 0 {
				ld.Name = it.rule.Also[k-1].Limit.Name
			} else {
				ld.Name = it.rule.Limit.Name
			}
		}
		s.setLimitStatus(it, allowed, res.Shadowed, ld)
		if res.Outcome == check.Degraded {
			it.storeFailed = true
		} else {
			s.countDecided(it, allowed && !res.Shadowed, res.Cached, ld)
		}
	}
	for i := range items {
		if j, ok := dupOf[&items[i]]; ok {
			items[i].status = joint[j].status
			items[i].decision = joint[j].decision
		}
	}
	return nil
}

// jointLimitName is a valid limit name (letters, digits, '_', '-') unique to
// a descriptor path and subject: the engine's own unambiguous subject hash.
func jointLimitName(path, subject string) string {
	return "d" + sluice.SubjectTag("", path, subject)
}

func currentLimit(r *Rule) *rlspb.RateLimitResponse_RateLimit {
	cl := &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
	if r.UnitMultiplier > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
	}
	return cl
}

// policyName names a rule in the RateLimit-Policy header.
func policyName(r *Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.Path
}

// responseHeaders renders the rate-limit headers of the most restrictive
// limited descriptor through ratelimitheader.Set.
func responseHeaders(items []item, allowed bool) []*corev3.HeaderValue {
	var d sluice.Decision
	for _, it := range items {
		if it.decision != nil {
			d.Limits = append(d.Limits, *it.decision)
		}
	}
	if len(d.Limits) == 0 {
		return nil
	}
	d.Combine()
	if allowed && !d.Allowed {
		d.Allowed, d.RetryAfter = true, 0
	}
	h := http.Header{}
	ratelimitheader.Set(h, "", d)
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*corev3.HeaderValue, 0, len(keys))
	for _, k := range keys {
		out = append(out, &corev3.HeaderValue{Key: strings.ToLower(k), Value: h.Get(k)})
	}
	return out
}

// envoyHeaders are envoyproxy/ratelimit's response headers: the limit, the
// remaining quota and the seconds to reset of the descriptor with the least
// remaining, or of the last one over its limit (quota-mode descriptors
// aside).
func (s *Server) envoyHeaders(items []item) []*corev3.HeaderValue {
	var pick *item
	least := uint32(math.MaxUint32)
	for i := range items {
		st := items[i].status
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() < least {
			pick, least = &items[i], st.GetLimitRemaining()
		}
		quota := items[i].rule != nil && items[i].rule.QuotaMode
		if st.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT && !quota {
			pick, least = &items[i], 0
		}
	}
	if pick == nil || pick.status.GetCurrentLimit() == nil {
		return nil
	}
	st := pick.status
	reset := st.GetDurationUntilReset().GetSeconds()
	if st.GetDurationUntilReset() == nil && pick.rule != nil {
		// Decided without figures (a failure policy's deny): the end of
		// the window by this instance's clock.
		reset = wholeSeconds(untilWindowEnd(pick.rule, s.clock())).GetSeconds()
	}
	return []*corev3.HeaderValue{
		{Key: s.headerNames[0], Value: strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: s.headerNames[1], Value: strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)},
		{Key: s.headerNames[2], Value: strconv.FormatInt(reset, 10)},
	}
}

// dynamicMetadata is envoyproxy/ratelimit's dynamic metadata: the domain,
// each descriptor's entries ("key=value"), limit override and hits_addend,
// the request's hits_addend, and under "metadata" the metadata of the rules
// the request passed, merged (the first descriptor's value wins where two
// set the same field, and nested structs merge).
func dynamicMetadata(req *rlspb.RateLimitRequest, items []item) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if d.GetLimit() != nil {
			f["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	out := &structpb.Struct{Fields: map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}}
	if h := req.GetHitsAddend(); h != 0 {
		out.Fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, it := range items {
		r := it.rule
		if r == nil || r.Metadata == nil || it.replaced || r.Unlimited || it.status.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			continue
		}
		mergeStruct(passed, r.Metadata)
	}
	if len(passed.Fields) > 0 {
		out.Fields["metadata"] = structpb.NewStructValue(passed)
	}
	return out
}

// mergeStruct adds src's fields that dst lacks, merging structs present in
// both; the configuration's own structs are copied, never shared.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if cs, vs := cur.GetStructValue(), v.GetStructValue(); cs != nil && vs != nil {
			mergeStruct(cs, vs)
		}
	}
}
