package envoyemu

//lint:file-ignore SA1019 Envoy still honours its deprecated fields, so the emulator reads them as Envoy does.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

var typeUnits = map[string]typev3.RateLimitUnit{
	"SECOND": typev3.RateLimitUnit_SECOND, "MINUTE": typev3.RateLimitUnit_MINUTE, "HOUR": typev3.RateLimitUnit_HOUR,
	"DAY": typev3.RateLimitUnit_DAY, "MONTH": typev3.RateLimitUnit_MONTH, "YEAR": typev3.RateLimitUnit_YEAR,
}

// rateLimitFilter is envoy.filters.http.ratelimit.
type rateLimitFilter struct {
	e        *Emulator
	name     string // the http_filters entry's name, which per-route configs are keyed by
	cfg      *rlfilterv3.RateLimit
	cluster  *cluster
	timeout  time.Duration
	policies []*policy // the filter's own rate_limits
	// perRoute is each route's and virtual host's RateLimitPerRoute, by
	// its proto, parsed once.
	perRoute map[*rlfilterv3.RateLimitPerRoute]*routeRateLimits
}

type routeRateLimits struct {
	pb       *rlfilterv3.RateLimitPerRoute
	policies []*policy
}

// rateLimitState is what the filter keeps of a stream between the
// request and its end.
type rateLimitState struct {
	started         bool // descriptors were looked for: a stream-done charge may follow
	perRoute        *routeRateLimits
	responseHeaders http.Header // to add to the response
}

func (e *Emulator) newRateLimitFilter(name string, cfg *rlfilterv3.RateLimit) (*rateLimitFilter, error) {
	f := &rateLimitFilter{e: e, name: name, cfg: cfg, timeout: 20 * time.Millisecond, perRoute: map[*rlfilterv3.RateLimitPerRoute]*routeRateLimits{}}
	if cfg.GetTimeout() != nil {
		f.timeout = cfg.GetTimeout().AsDuration()
	}
	if e.opts.RateLimitTimeout != 0 {
		f.timeout = e.opts.RateLimitTimeout
	}
	svc := cfg.GetRateLimitService().GetGrpcService()
	if svc.GetEnvoyGrpc() == nil {
		return nil, errors.New("rate_limit_service: only envoy_grpc is emulated")
	}
	f.cluster = e.clusters[svc.GetEnvoyGrpc().GetClusterName()]
	if f.cluster == nil {
		return nil, fmt.Errorf("rate_limit_service: no cluster %q", svc.GetEnvoyGrpc().GetClusterName())
	}
	if cfg.GetFilterEnabled() != nil || cfg.GetFilterEnforced() != nil || cfg.GetFailureModeDenyPercent() != nil {
		return nil, errors.New("filter_enabled, filter_enforced and failure_mode_deny_percent are not emulated")
	}
	var err error
	f.policies, err = newPolicies(cfg.GetRateLimits(), filterConfig, e.warn)
	return f, err
}

func (f *rateLimitFilter) addPerRoute(pr *rlfilterv3.RateLimitPerRoute) error {
	policies, err := newPolicies(pr.GetRateLimits(), perRouteConfig, f.e.warn)
	if err != nil {
		return err
	}
	f.perRoute[pr] = &routeRateLimits{pb: pr, policies: policies}
	return nil
}

// descriptors are the stream's descriptors for the request (onStreamDone
// false) or its end, chosen as Envoy's filter chooses its policies: a
// RateLimitPerRoute with rate_limits, else the filter's rate_limits, else
// the route's with the virtual host's included, overridden or ignored as
// the route says.
func (f *rateLimitFilter) descriptors(s *stream, st *rateLimitState, onStreamDone bool) []*ratelimitv3.RateLimitDescriptor {
	var out []*ratelimitv3.RateLimitDescriptor
	add := func(ps []*policy, checkStage bool) {
		for _, p := range ps {
			if p.onStreamDone != onStreamDone || checkStage && p.stage != f.cfg.GetStage() {
				continue
			}
			if d, ok := p.descriptor(s, f.e.warn); ok {
				out = append(out, d)
			}
		}
	}
	if st.perRoute != nil && len(st.perRoute.policies) > 0 {
		add(st.perRoute.policies, false)
		return out
	}
	if len(f.policies) > 0 {
		add(f.policies, false)
		return out
	}
	add(s.route.policies, true)
	vh := rlfilterv3.RateLimitPerRoute_OVERRIDE
	if s.route.pb.GetRoute().GetIncludeVhRateLimits().GetValue() {
		vh = rlfilterv3.RateLimitPerRoute_INCLUDE
	} else if st.perRoute != nil {
		vh = st.perRoute.pb.GetVhRateLimits()
	}
	switch vh {
	case rlfilterv3.RateLimitPerRoute_INCLUDE:
		add(s.vhost.policies, true)
	case rlfilterv3.RateLimitPerRoute_OVERRIDE:
		if len(s.route.policies) == 0 {
			add(s.vhost.policies, true)
		}
	}
	return out
}

func (f *rateLimitFilter) domain(st *rateLimitState) string {
	if st.perRoute != nil && st.perRoute.pb.GetDomain() != "" {
		return st.perRoute.pb.GetDomain()
	}
	return f.cfg.GetDomain()
}

func (f *rateLimitFilter) state(s *stream) *rateLimitState {
	st, _ := s.state[f].(*rateLimitState)
	if st == nil {
		st = &rateLimitState{}
		s.state[f] = st
	}
	return st
}

func (f *rateLimitFilter) decode(s *stream) bool {
	internal := s.header.Get("x-envoy-internal") == "true"
	switch f.cfg.GetRequestType() {
	case "external":
		if internal {
			return false
		}
	case "internal":
		if !internal {
			return false
		}
	}
	if s.route.pb.GetRoute() == nil {
		return false // a direct response has no route entry
	}
	st := f.state(s)
	st.started = true
	if pr, ok := s.perFilterConfig(f.name).(*rlfilterv3.RateLimitPerRoute); ok {
		st.perRoute = f.perRoute[pr]
	}
	descs := f.descriptors(s, st, false)
	if len(descs) == 0 {
		return false
	}
	client, err := f.cluster.rateLimitClient(f.e)
	var resp *rlspb.RateLimitResponse
	if err == nil {
		ctx, cancel := context.WithTimeout(s.req.Context(), f.timeout)
		resp, err = client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: f.domain(st), Descriptors: descs})
		cancel()
	}
	f.e.log.Debug("envoyemu: ShouldRateLimit", "domain", f.domain(st), "descriptors", descs, "code", resp.GetOverallCode().String(), "err", err)
	if err != nil {
		if !f.cfg.GetFailureModeDeny() {
			return false // failure_mode_allowed
		}
		status := http.StatusInternalServerError
		if c := f.cfg.GetStatusOnError().GetCode(); c != 0 {
			status = int(c)
		}
		s.localReply(status, nil, "")
		return true
	}
	if md := resp.GetDynamicMetadata(); len(md.GetFields()) > 0 {
		ns := orDefault(f.cfg.GetMetadataNamespace(), "envoy.filters.http.ratelimit")
		s.setDynamic(ns, md)
	}
	st.responseHeaders = http.Header{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		st.responseHeaders[lower(h.GetKey())] = append(st.responseHeaders[lower(h.GetKey())], h.GetValue())
	}
	over := resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT
	if over && !f.cfg.GetDisableXEnvoyRatelimitedHeader() {
		st.responseHeaders["x-envoy-ratelimited"] = []string{"true"}
	}
	if f.cfg.GetEnableXRatelimitHeaders() == rlfilterv3.RateLimit_DRAFT_VERSION_03 {
		for k, v := range xRateLimitHeaders(resp.GetStatuses()) {
			st.responseHeaders[k] = v
		}
	}
	if !over {
		for _, h := range resp.GetRequestHeadersToAdd() {
			s.header.Add(h.GetKey(), h.GetValue())
		}
		return false
	}
	status := http.StatusTooManyRequests
	if c := f.cfg.GetRateLimitedStatus().GetCode(); c != 0 {
		status = int(c)
	}
	headers := st.responseHeaders
	st.responseHeaders = nil
	for _, h := range f.cfg.GetResponseHeadersToAdd() {
		headers[lower(h.GetHeader().GetKey())] = append(headers[lower(h.GetHeader().GetKey())], h.GetHeader().GetValue())
	}
	if f.cfg.GetEnableRetryAfterHeader() {
		//lint:ignore SA1008 the response's headers are kept lower case, as Envoy sends them
		if _, set := headers["retry-after"]; !set {
			if secs, any := retryAfter(resp.GetStatuses()); any {
				headers["retry-after"] = []string{strconv.FormatInt(secs, 10)}
			}
		}
	}
	s.localReply(status, headers, string(resp.GetRawBody()))
	return true
}

func (f *rateLimitFilter) encode(s *stream) {
	st := f.state(s)
	for k, v := range st.responseHeaders {
		s.respHeader[k] = append(s.respHeader[k], v...)
	}
	st.responseHeaders = nil
}

// done sends the apply_on_stream_done descriptors, whatever the answer
// was (a request denied on the way in is charged too, as in Envoy), and
// reads nothing of the reply.
func (f *rateLimitFilter) done(s *stream) {
	st := f.state(s)
	if !st.started {
		return
	}
	descs := f.descriptors(s, st, true)
	if len(descs) == 0 {
		return
	}
	client, err := f.cluster.rateLimitClient(f.e)
	if err != nil {
		return
	}
	domain := f.domain(st)
	f.e.inFlight.add(1)
	go func() {
		defer f.e.inFlight.add(-1)
		// Envoy's stream-done call outlives the stream; its timeout is
		// the filter's.
		ctx, cancel := context.WithTimeout(context.Background(), max(f.timeout, time.Second))
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
		f.e.log.Debug("envoyemu: ShouldRateLimit on stream done", "domain", domain, "descriptors", descs, "code", resp.GetOverallCode().String(), "err", err)
	}()
}

// xRateLimitHeaders are the draft 03 headers Envoy derives from the
// statuses: the limit and remaining of the status with the least
// remaining, the quota policy of each.
func xRateLimitHeaders(statuses []*rlspb.RateLimitResponse_DescriptorStatus) http.Header {
	var min *rlspb.RateLimitResponse_DescriptorStatus
	policy := ""
	for _, st := range statuses {
		if st.GetCurrentLimit() == nil {
			continue
		}
		if min == nil || st.GetLimitRemaining() < min.GetLimitRemaining() {
			min = st
		}
		if w := unitSeconds(st.GetCurrentLimit().GetUnit()); w != 0 {
			policy += fmt.Sprintf(", %d;w=%d", st.GetCurrentLimit().GetRequestsPerUnit(), w)
			if n := st.GetCurrentLimit().GetName(); n != "" {
				policy += fmt.Sprintf(";name=%q", n)
			}
		}
	}
	h := http.Header{}
	if min == nil {
		return h
	}
	h["x-ratelimit-limit"] = []string{fmt.Sprintf("%d%s", min.GetCurrentLimit().GetRequestsPerUnit(), policy)}
	h["x-ratelimit-remaining"] = []string{strconv.FormatUint(uint64(min.GetLimitRemaining()), 10)}
	h["x-ratelimit-reset"] = []string{strconv.FormatInt(min.GetDurationUntilReset().GetSeconds(), 10)}
	return h
}

func retryAfter(statuses []*rlspb.RateLimitResponse_DescriptorStatus) (int64, bool) {
	var secs int64
	any := false
	for _, st := range statuses {
		if st.GetCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			any = true
			secs = max(secs, st.GetDurationUntilReset().GetSeconds(), 1)
		}
	}
	return secs, any
}

func unitSeconds(u rlspb.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 86400
	}
	return 0
}
