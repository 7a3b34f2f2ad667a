package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
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
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicelabs/sluice"
)

// Checker decides a check under a failure policy. *guard.Guard implements it
// (deadline, circuit breaker, failure policy); StoreChecker adapts a bare
// Store.
type Checker interface {
	Check(ctx context.Context, req sluice.Request, mode sluice.FailureMode) (sluice.Decision, error)
}

// Observer records decisions; *metrics.Metrics implements it. Rules are
// labelled by their configured path, never by a request's values.
type Observer interface {
	ObserveDecision(source, rule, result string)
	ObserveCheck(source string, d time.Duration)
}

// Metric names of results, as in package metrics.
const (
	source             = "envoy"
	resultAllowed      = "allowed"
	resultDenied       = "denied"
	resultDegraded     = "degraded"
	resultShadowDenied = "shadow_denied"
	resultNoRule       = "no_rule"
	resultError        = "error"
)

// Options configure a Server.
type Options struct {
	// Checker decides each check; required.
	Checker Checker
	// Logger receives reload and error reports; slog.Default() when nil.
	Logger *slog.Logger
	// Observer, if set, counts decisions and check durations.
	Observer Observer
	// ResponseHeaders adds X-RateLimit-Limit/-Remaining/-Reset, the IETF
	// RateLimit-Policy and RateLimit fields, and Retry-After on a deny, to
	// response_headers_to_add (envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
}

// Server answers Envoy's ShouldRateLimit. It is safe for concurrent use, and
// its configuration can be swapped while it serves.
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer
	checker         Checker
	log             *slog.Logger
	observer        Observer
	responseHeaders bool
	config          atomic.Pointer[Config]
	health          *health.Server
}

// NewServer returns a Server with no configuration: it answers UNAVAILABLE
// until SetConfig is called.
func NewServer(opts Options) *Server {
	s := &Server{
		checker:         opts.Checker,
		log:             opts.Logger,
		observer:        opts.Observer,
		responseHeaders: opts.ResponseHeaders,
		health:          health.NewServer(),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.observer == nil {
		s.observer = noObserver{}
	}
	s.setServing(false)
	return s
}

// SetConfig replaces the configuration; requests in flight finish with the
// one they started with.
func (s *Server) SetConfig(cfg *Config) {
	s.config.Store(cfg)
	s.setServing(cfg != nil)
}

// Config returns the configuration in force.
func (s *Server) Config() *Config { return s.config.Load() }

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
	rule     *Rule
	subject  string
	cost     int64
	replaced bool
	status   *rlspb.RateLimitResponse_DescriptorStatus
	// decision holds the descriptor's figures for the response headers.
	decision *sluice.LimitDecision
}

// ShouldRateLimit decides a request: each descriptor gets its own status, and
// the overall code is OVER_LIMIT if any descriptor is over its limit.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	defer func() { s.observer.ObserveCheck(source, time.Since(start)) }()

	cfg := s.config.Load()
	if cfg == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration is loaded yet")
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "the rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "the request has no descriptors; Envoy sends at least one per rate limit action")
	}
	domain := cfg.Domain(req.GetDomain())
	items := make([]item, len(req.GetDescriptors()))
	for i, desc := range req.GetDescriptors() {
		if len(desc.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		it := &items[i]
		it.cost = hitsOf(req, desc)
		if domain == nil {
			continue
		}
		if desc.GetLimit() != nil {
			rule, subject, err := overrideRule(domain, desc)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			it.rule, it.subject = rule, subject
			continue
		}
		if m, ok := domain.Match(desc.GetEntries()); ok {
			it.rule, it.subject = m.Rule, m.Subject
		}
	}
	markReplaced(items)

	var err error
	if domain != nil && domain.AllOrNothing {
		err = s.checkAllOrNothing(ctx, domain, items)
	} else {
		err = s.checkEach(ctx, domain, items)
	}
	if err != nil {
		return nil, err
	}

	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items))}
	for i := range items {
		resp.Statuses[i] = items[i].status
		if items[i].status.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if s.responseHeaders {
		resp.ResponseHeadersToAdd = responseHeaders(items, resp.OverallCode == rlspb.RateLimitResponse_OK)
	}
	return resp, nil
}

// hitsOf is the cost of a descriptor: its own hits_addend if set (even 0),
// else the request's, where 0 means 1, as in envoyproxy/ratelimit.
func hitsOf(req *rlspb.RateLimitRequest, desc *ratelimitv3.RateLimitDescriptor) int64 {
	if desc.GetIsNegativeHits() {
		// Sluice never gives quota back; a refill only looks.
		return 0
	}
	if h := desc.GetHitsAddend(); h != nil {
		return int64(min(h.GetValue(), math.MaxInt64/2))
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

// overrideRule is the rule of a descriptor that carries its own limit
// (Envoy's limit override): a fixed window of the given size, counted per
// distinct descriptor.
func overrideRule(d *Domain, desc *ratelimitv3.RateLimitDescriptor) (*Rule, string, error) {
	o := desc.GetLimit()
	unit := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	name := strings.ToLower(unit.String())
	secs, ok := unitSeconds[name]
	if !ok {
		return nil, "", fmt.Errorf("the limit override has unknown unit %v", o.GetUnit())
	}
	multiplier := uint32(1)
	if o.GetUnitMultiplier() != nil {
		multiplier = max(1, o.GetUnitMultiplier().GetValue())
	}
	window := time.Duration(secs) * time.Duration(multiplier) * time.Second
	r := &Rule{Path: "*override", RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, UnitMultiplier: multiplier, FailureMode: d.FailureMode}
	r.Limit = sluice.Limit{Name: "per_" + name, Algorithm: sluice.AlgorithmFixedWindow, Window: window}
	if r.RequestsPerUnit > 0 {
		r.Limit = sluice.FixedWindow(int64(r.RequestsPerUnit), window).Named("per_" + name)
		if err := r.Limit.Validate(); err != nil {
			return nil, "", err
		}
	}
	var subject strings.Builder
	for _, e := range desc.GetEntries() {
		for _, part := range []string{e.GetKey(), e.GetValue()} {
			subject.WriteString(strconv.Itoa(len(part)))
			subject.WriteByte(':')
			subject.WriteString(part)
		}
	}
	return r, subject.String(), nil
}

// tenant namespaces a domain's counters apart from the HTTP service's tenants.
func tenant(d *Domain) string { return "envoy:" + d.Name }

// maxConcurrentChecks bounds the store calls one request makes at once.
const maxConcurrentChecks = 16

// checkEach decides every descriptor on its own, as envoyproxy/ratelimit
// does. The store calls run concurrently, so a request with several limited
// descriptors waits about one round trip, not one per descriptor.
func (s *Server) checkEach(ctx context.Context, d *Domain, items []item) error {
	var pending []*item
	for i := range items {
		if !s.decideWithoutStore(&items[i]) {
			pending = append(pending, &items[i])
		}
	}
	if len(pending) == 1 {
		return overLimitDespite(ctx, items, s.checkOne(ctx, d, pending[0]))
	}
	errs := make([]error, len(pending))
	var wg sync.WaitGroup
	// A bounded number of workers: a request's descriptor count is the
	// caller's to choose (POST /json takes thousands in 64 KiB), and must
	// not become as many goroutines and simultaneous store calls.
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
				errs[i] = s.checkOne(ctx, d, pending[i])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return overLimitDespite(ctx, items, err)
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
	if err == nil || ctx.Err() != nil || status.Code(err) != codes.Unavailable {
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
func (s *Server) checkOne(ctx context.Context, d *Domain, it *item) error {
	r := it.rule
	if done := s.decideWithoutStore(it); done {
		return nil
	}
	mode := r.FailureMode
	if mode == "" {
		mode = sluice.FailClosed
	}
	dec, err := s.checker.Check(ctx, sluice.Request{
		Tenant:  tenant(d),
		Rule:    r.Path,
		Subject: it.subject,
		Limits:  []sluice.Limit{r.Limit},
		Cost:    it.cost,
	}, mode)
	if err != nil {
		return s.checkFailed(ctx, d, []*item{it}, r.FailureMode, err)
	}
	var ld sluice.LimitDecision
	if len(dec.Limits) > 0 {
		ld = dec.Limits[0]
	}
	s.finish(it, dec.Allowed, dec.Degraded, ld)
	return nil
}

// decideWithoutStore answers the descriptors that need no store call: no
// rule, a replaced or unlimited rule, requests_per_unit 0, or a cost that can
// never fit (denied, as envoyproxy/ratelimit does, rather than an error that
// Envoy might let through).
func (s *Server) decideWithoutStore(it *item) bool {
	r := it.rule
	switch {
	case r == nil:
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		s.observer.ObserveDecision(source, "", resultNoRule)
	case it.replaced:
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	case r.Unlimited:
		it.status = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		s.observer.ObserveDecision(source, r.Path, resultAllowed)
	case it.cost > r.Limit.Capacity:
		window := ruleWindow(r)
		s.finish(it, false, false, sluice.LimitDecision{Name: r.Limit.Name, Algorithm: r.Limit.Algorithm, Limit: r.Limit.Capacity, Window: window, ResetAfter: window, RetryAfter: window})
	case r.Limit.Capacity == 0:
		// requests_per_unit: 0 with hits 0: a look at a limit that admits
		// nothing. The engine has no empty limit to ask, and there is
		// nothing to count: OK with none remaining, as envoyproxy/ratelimit
		// answers.
		window := ruleWindow(r)
		s.finish(it, true, false, sluice.LimitDecision{Allowed: true, Name: r.Limit.Name, Algorithm: r.Limit.Algorithm, Window: window, ResetAfter: window})
	default:
		return false
	}
	return true
}

// ruleWindow is the period a rule's quota refers to; a token bucket of
// requests_per_unit: 0 has no refill rate, so its unit's length stands in.
func ruleWindow(r *Rule) time.Duration {
	if r.Limit.Algorithm == sluice.AlgorithmTokenBucket && r.Limit.Capacity > 0 {
		return sluice.PolicyWindow(r.Limit)
	}
	return r.Limit.Window
}

// finish sets a checked descriptor's status and counts it.
func (s *Server) finish(it *item, allowed, degraded bool, ld sluice.LimitDecision) {
	r := it.rule
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		Code:         rlspb.RateLimitResponse_OK,
		CurrentLimit: currentLimit(r),
	}
	result := resultAllowed
	switch {
	case degraded:
		result = resultDegraded
		if !allowed {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		}
	case !allowed && r.Shadow:
		result = resultShadowDenied
	case !allowed:
		result = resultDenied
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if len(ld.Name) > 0 || ld.Limit > 0 {
		st.LimitRemaining = uint32(min(max(ld.Remaining, 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(ld.ResetAfter)
		ld.Name = policyName(r)
		if r.Shadow && !allowed {
			// The client is let through, so its headers must not say no.
			ld.Allowed, ld.RetryAfter = true, 0
		}
		it.decision = &ld
	}
	it.status = st
	s.observer.ObserveDecision(source, r.Path, result)
}

// checkFailed handles a store that could not answer: with no failure_mode
// configured, the whole call fails with UNAVAILABLE and Envoy's own
// failure_mode_deny decides, as with envoyproxy/ratelimit; an explicit
// "closed" answers OVER_LIMIT for the affected descriptors.
func (s *Server) checkFailed(ctx context.Context, d *Domain, its []*item, mode sluice.FailureMode, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	for _, it := range its {
		s.observer.ObserveDecision(source, it.rule.Path, resultError)
	}
	if errors.Is(err, sluice.ErrInvalid) {
		return status.Errorf(codes.InvalidArgument, "domain %q: %v", d.Name, err)
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
// deny the others.
func (s *Server) checkAllOrNothing(ctx context.Context, d *Domain, items []item) error {
	var (
		joint    []*item
		limits   []sluice.Limit
		byName   = map[string]int{}
		dupOf    = map[*item]int{}
		cost     = int64(-1)
		neverFit bool
	)
	for i := range items {
		it := &items[i]
		r := it.rule
		if r == nil || it.replaced || r.Unlimited || r.Shadow {
			if err := s.checkOne(ctx, d, it); err != nil {
				return err
			}
			continue
		}
		if cost >= 0 && it.cost != cost {
			return status.Errorf(codes.InvalidArgument, "domain %q checks all descriptors together (all_or_nothing), so they need the same hits_addend; got %d and %d", d.Name, cost, it.cost)
		}
		cost = it.cost
		if it.cost > r.Limit.Capacity || r.Limit.Capacity == 0 {
			// Decided without the store: a cost that can never fit (which
			// denies the whole request), or a requests_per_unit: 0 rule,
			// which the engine cannot check.
			neverFit = neverFit || it.cost > r.Limit.Capacity
			s.decideWithoutStore(it)
			continue
		}
		name := jointLimitName(r.Path, it.subject)
		if j, ok := byName[name]; ok {
			// The same counter twice in one request is counted once.
			dupOf[it] = j
			continue
		}
		l := r.Limit
		l.Name = name
		byName[name] = len(joint)
		joint = append(joint, it)
		limits = append(limits, l)
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
	mode := d.FailureMode
	if mode == "" {
		mode = sluice.FailClosed
	}
	dec, err := s.checker.Check(ctx, sluice.Request{Tenant: tenant(d), Rule: allOrNothingRule, Limits: limits, Cost: cost}, mode)
	if err != nil {
		return overLimitDespite(ctx, items, s.checkFailed(ctx, d, joint, d.FailureMode, err))
	}
	for j, it := range joint {
		var ld sluice.LimitDecision
		allowed := dec.Allowed && !neverFit
		if j < len(dec.Limits) {
			ld = dec.Limits[j]
			if !allowed && ld.Allowed {
				// This limit had room, but another denied the request;
				// it is not the one over the limit.
				allowed = true
			}
		}
		s.finish(it, allowed, dec.Degraded, ld)
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
// limited descriptor through sluice.SetHeaders.
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
	sluice.SetHeaders(h, "", d)
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

// StoreChecker adapts a bare Store to a Checker, without a deadline or a
// circuit breaker (use guard.Guard for those). When the store fails, "open"
// and "local" allow (marked degraded); anything else returns the error.
func StoreChecker(store sluice.Store) Checker { return storeChecker{store} }

type storeChecker struct{ store sluice.Store }

func (c storeChecker) Check(ctx context.Context, req sluice.Request, mode sluice.FailureMode) (sluice.Decision, error) {
	d, err := c.store.Check(ctx, req)
	if err == nil || errors.Is(err, sluice.ErrInvalid) || ctx.Err() != nil {
		return d, err
	}
	if mode == sluice.FailOpen || mode == sluice.FailLocal {
		return sluice.Decision{Allowed: true, Degraded: true}, nil
	}
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		err = fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
	}
	return sluice.Decision{}, err
}

type noObserver struct{}

func (noObserver) ObserveDecision(string, string, string) {}
func (noObserver) ObserveCheck(string, time.Duration)     {}
