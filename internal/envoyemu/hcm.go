package envoyemu

//lint:file-ignore SA1019 Envoy still honours its deprecated fields, so the emulator reads them as Envoy does.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	headertometadatav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// httpFilter is one of the HTTP connection manager's filters.
type httpFilter interface {
	// decode runs on the request; true: the filter answered it, and the
	// filters after it do not run.
	decode(s *stream) bool
	// encode runs on the response before it is sent, in reverse order.
	encode(s *stream)
	// done runs once the response has been sent.
	done(s *stream)
}

type connectionManager struct {
	e                *Emulator
	useRemoteAddress bool
	trustedHops      uint32
	routes           *routeConfig
	filters          []httpFilter
}

type routeConfig struct {
	vhosts          []*vhost
	perFilter       map[string]proto.Message
	responseHeaders []headerToAdd
}

type vhost struct {
	pb              *routev3.VirtualHost
	routes          []*route
	policies        []*policy
	perFilter       map[string]proto.Message
	responseHeaders []headerToAdd
}

type route struct {
	pb              *routev3.Route
	matchPath       func(path, pathAndQuery string) bool
	headers         []headerMatcher
	policies        []*policy
	perFilter       map[string]proto.Message
	responseHeaders []headerToAdd
}

type headerToAdd struct {
	key    string
	value  format
	action corev3.HeaderValueOption_HeaderAppendAction
	keep   bool // keep_empty_value
}

func (e *Emulator) newConnectionManager(l *listenerv3.Listener) (http.Handler, error) {
	if len(l.GetFilterChains()) != 1 || l.GetDefaultFilterChain() != nil {
		return nil, errors.New("exactly one filter chain is emulated")
	}
	fc := l.GetFilterChains()[0]
	if fc.GetFilterChainMatch() != nil || fc.GetTransportSocket() != nil {
		return nil, errors.New("filter_chain_match and transport_socket (TLS) are not emulated")
	}
	if len(fc.GetFilters()) != 1 {
		return nil, errors.New("a filter chain of exactly one network filter, the HTTP connection manager, is emulated")
	}
	var hcm hcmv3.HttpConnectionManager
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		return nil, fmt.Errorf("only the HTTP connection manager is emulated: %w", err)
	}
	cm := &connectionManager{e: e, useRemoteAddress: hcm.GetUseRemoteAddress().GetValue(), trustedHops: hcm.GetXffNumTrustedHops()}
	for i, hf := range hcm.GetHttpFilters() {
		msg, err := hf.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("http_filters[%d] %s: %w", i, hf.GetName(), err)
		}
		var f httpFilter
		switch c := msg.(type) {
		case *rlfilterv3.RateLimit:
			f, err = e.newRateLimitFilter(hf.GetName(), c)
		case *headermutationv3.HeaderMutation:
			f, err = newHeaderMutation(c)
		case *headertometadatav3.Config:
			f, err = newHeaderToMetadata(c)
		case *routerv3.Router:
			if i != len(hcm.GetHttpFilters())-1 {
				return nil, errors.New("the router must be the last HTTP filter")
			}
			f = &router{e: e}
		default:
			err = fmt.Errorf("the filter %T is not emulated", c)
		}
		if err != nil {
			return nil, fmt.Errorf("http_filters[%d] %s: %w", i, hf.GetName(), err)
		}
		cm.filters = append(cm.filters, f)
	}
	if _, ok := cm.filters[len(cm.filters)-1].(*router); !ok {
		return nil, errors.New("the last HTTP filter must be the router")
	}
	rc := hcm.GetRouteConfig()
	if rc == nil {
		return nil, errors.New("only a static route_config is emulated (not RDS nor scoped routes)")
	}
	var err error
	cm.routes, err = cm.newRouteConfig(rc, hcm.GetHttpFilters())
	return cm, err
}

func (cm *connectionManager) newRouteConfig(rc *routev3.RouteConfiguration, hfs []*hcmv3.HttpFilter) (*routeConfig, error) {
	out := &routeConfig{}
	var err error
	if out.perFilter, err = cm.perFilterConfigs(rc.GetTypedPerFilterConfig(), hfs); err != nil {
		return nil, err
	}
	if out.responseHeaders, err = headersToAdd(rc.GetResponseHeadersToAdd()); err != nil {
		return nil, err
	}
	for _, pb := range rc.GetVirtualHosts() {
		vh := &vhost{pb: pb}
		if vh.policies, err = newPolicies(pb.GetRateLimits(), onRoute, cm.e.warn); err != nil {
			return nil, fmt.Errorf("virtual host %s: %w", pb.GetName(), err)
		}
		if vh.perFilter, err = cm.perFilterConfigs(pb.GetTypedPerFilterConfig(), hfs); err != nil {
			return nil, fmt.Errorf("virtual host %s: %w", pb.GetName(), err)
		}
		if vh.responseHeaders, err = headersToAdd(pb.GetResponseHeadersToAdd()); err != nil {
			return nil, err
		}
		for i, rpb := range pb.GetRoutes() {
			r, err := cm.newRoute(rpb, hfs)
			if err != nil {
				return nil, fmt.Errorf("virtual host %s, route %d: %w", pb.GetName(), i, err)
			}
			vh.routes = append(vh.routes, r)
		}
		out.vhosts = append(out.vhosts, vh)
	}
	return out, nil
}

func (cm *connectionManager) newRoute(pb *routev3.Route, hfs []*hcmv3.HttpFilter) (*route, error) {
	r := &route{pb: pb}
	m := pb.GetMatch()
	if m.GetQueryParameters() != nil || m.GetGrpc() != nil || m.GetTlsContext() != nil || m.GetRuntimeFraction() != nil || m.GetDynamicMetadata() != nil || m.GetCookies() != nil {
		return nil, errors.New("only prefix, path, safe_regex, path_separated_prefix and headers are emulated in a route's match")
	}
	fold := func(s string) string { return s }
	if m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue() {
		fold = strings.ToLower
	}
	switch spec := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		r.matchPath = func(_, pq string) bool { return strings.HasPrefix(fold(pq), fold(spec.Prefix)) }
	case *routev3.RouteMatch_Path:
		r.matchPath = func(p, _ string) bool { return fold(p) == fold(spec.Path) }
	case *routev3.RouteMatch_PathSeparatedPrefix:
		r.matchPath = func(p, _ string) bool {
			p, want := fold(p), fold(spec.PathSeparatedPrefix)
			return p == want || strings.HasPrefix(p, want+"/")
		}
	case *routev3.RouteMatch_SafeRegex:
		re, err := fullRegexp(spec.SafeRegex.GetRegex())
		if err != nil {
			return nil, err
		}
		r.matchPath = func(p, _ string) bool { return re.MatchString(p) }
	default:
		return nil, fmt.Errorf("path specifier %T is not emulated", spec)
	}
	var err error
	if r.headers, err = newHeaderMatchers(m.GetHeaders()); err != nil {
		return nil, err
	}
	switch a := pb.GetAction().(type) {
	case *routev3.Route_Route:
		ra := a.Route
		if ra.GetCluster() == "" {
			return nil, errors.New("only a route to a named cluster is emulated (not cluster_header nor weighted_clusters)")
		}
		if cm.e.clusters[ra.GetCluster()] == nil {
			return nil, fmt.Errorf("no cluster %q", ra.GetCluster())
		}
		if ra.GetPrefixRewrite() != "" || ra.GetRegexRewrite() != nil || ra.GetHostRewriteSpecifier() != nil {
			return nil, errors.New("rewrites are not emulated")
		}
		if r.policies, err = newPolicies(ra.GetRateLimits(), onRoute, cm.e.warn); err != nil {
			return nil, err
		}
	case *routev3.Route_DirectResponse:
		if a.DirectResponse.GetBody().GetFilename() != "" {
			return nil, errors.New("a direct response's body from a file is not emulated")
		}
	default:
		return nil, fmt.Errorf("route action %T is not emulated", a)
	}
	if r.perFilter, err = cm.perFilterConfigs(pb.GetTypedPerFilterConfig(), hfs); err != nil {
		return nil, err
	}
	if r.responseHeaders, err = headersToAdd(pb.GetResponseHeadersToAdd()); err != nil {
		return nil, err
	}
	return r, nil
}

// perFilterConfigs decodes typed_per_filter_config, by filter name.
func (cm *connectionManager) perFilterConfigs(m map[string]*anypb.Any, hfs []*hcmv3.HttpFilter) (map[string]proto.Message, error) {
	out := map[string]proto.Message{}
	for name, a := range m {
		msg, err := a.UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("typed_per_filter_config %s: %w", name, err)
		}
		pr, ok := msg.(*rlfilterv3.RateLimitPerRoute)
		if !ok {
			return nil, fmt.Errorf("typed_per_filter_config %s: %T is not emulated", name, msg)
		}
		for i, hf := range hfs {
			if hf.GetName() == name {
				if f, ok := cm.filters[i].(*rateLimitFilter); ok {
					if err := f.addPerRoute(pr); err != nil {
						return nil, fmt.Errorf("typed_per_filter_config %s: %w", name, err)
					}
				}
			}
		}
		out[name] = pr
	}
	return out, nil
}

func headersToAdd(hs []*corev3.HeaderValueOption) ([]headerToAdd, error) {
	var out []headerToAdd
	for _, h := range hs {
		f, err := parseFormat(h.GetHeader().GetValue())
		if err != nil {
			return nil, err
		}
		action := h.GetAppendAction()
		if h.GetAppend() != nil { // the deprecated bool
			action = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
			if h.GetAppend().GetValue() {
				action = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
			}
		}
		out = append(out, headerToAdd{key: h.GetHeader().GetKey(), value: f, action: action, keep: h.GetKeepEmptyValue()})
	}
	return out, nil
}

// apply adds the headers to h, formatting their values from s; keys are
// kept lower case, as Envoy sends them, when lowerKeys.
func applyHeaders(hs []headerToAdd, h http.Header, s *stream, ctx formatContext, lowerKeys bool) {
	for _, add := range hs {
		v := add.value.text(s, ctx)
		if v == "" && !add.keep {
			continue
		}
		k := canonical(add.key)
		if lowerKeys {
			k = lower(add.key)
		}
		_, exists := h[k]
		switch add.action {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			h[k] = append(h[k], v)
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !exists {
				h[k] = []string{v}
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			h[k] = []string{v}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if exists {
				h[k] = []string{v}
			}
		}
	}
}

func lower(s string) string { return strings.ToLower(s) }

// stream is one request and its response.
type stream struct {
	e        *Emulator
	req      *http.Request
	header   http.Header // the request's, as the filters change them
	remote   netip.Addr
	vhost    *vhost
	route    *route
	routes   *routeConfig
	dyn      map[string]*structpb.Struct // dynamic metadata by namespace
	upstream *endpoint
	state    map[any]any // each filter's

	status     int
	respHeader http.Header // lower-case keys
	body       []byte
}

func (s *stream) dynMetadata() *corev3.Metadata { return &corev3.Metadata{FilterMetadata: s.dyn} }

// setDynamic merges fields into the namespace ns, as Envoy's
// setDynamicMetadata does.
func (s *stream) setDynamic(ns string, fields *structpb.Struct) {
	cur := s.dyn[ns]
	if cur == nil {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		s.dyn[ns] = cur
	}
	for k, v := range fields.GetFields() {
		cur.Fields[k] = v
	}
}

func (s *stream) perFilterConfig(name string) proto.Message {
	for _, m := range []map[string]proto.Message{s.route.perFilter, s.vhost.perFilter, s.routes.perFilter} {
		if c, ok := m[name]; ok {
			return c
		}
	}
	return nil
}

func (s *stream) localReply(status int, headers http.Header, body string) {
	s.status = status
	if headers == nil {
		headers = http.Header{}
	}
	if body != "" {
		//lint:ignore SA1008 the response's headers are kept lower case, as Envoy sends them
		if _, ok := headers["content-type"]; !ok {
			headers["content-type"] = []string{"text/plain"}
		}
	}
	s.respHeader = headers
	s.body = []byte(body)
}

func (cm *connectionManager) match(r *http.Request) (*vhost, *route) {
	host := r.Host
	for _, vh := range cm.routes.vhosts {
		if !hostMatches(vh.pb.GetDomains(), host) {
			continue
		}
		for _, rt := range vh.routes {
			if rt.matchPath(r.URL.Path, r.URL.RequestURI()) && matchAll(rt.headers, r.Header) {
				return vh, rt
			}
		}
		return vh, nil
	}
	return nil, nil
}

func hostMatches(domains []string, host string) bool {
	h := lower(host)
	bare := h
	if i := strings.LastIndexByte(h, ':'); i > 0 && !strings.HasSuffix(h, "]") {
		bare = h[:i]
	}
	for _, d := range domains {
		d = lower(d)
		switch {
		case d == "*", d == h, d == bare:
			return true
		case strings.HasPrefix(d, "*") && (strings.HasSuffix(h, d[1:]) || strings.HasSuffix(bare, d[1:])):
			return true
		case strings.HasSuffix(d, "*") && strings.HasPrefix(h, d[:len(d)-1]):
			return true
		}
	}
	return false
}

func (cm *connectionManager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cm.e.inFlight.add(1)
	defer cm.e.inFlight.add(-1)
	s := &stream{e: cm.e, req: r, header: r.Header.Clone(), routes: cm.routes, dyn: map[string]*structpb.Struct{}, state: map[any]any{}}
	s.remote = remoteAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), cm.useRemoteAddress, cm.trustedHops)
	s.vhost, s.route = cm.match(r)
	if s.route == nil {
		s.localReply(http.StatusNotFound, nil, "")
		cm.write(w, s)
		return
	}
	last := len(cm.filters) - 1
	for i, f := range cm.filters {
		if f.decode(s) {
			last = i
			break
		}
	}
	for i := last; i >= 0; i-- {
		cm.filters[i].encode(s)
	}
	cm.write(w, s)
	for _, f := range cm.filters {
		f.done(s)
	}
}

// write sends the response whole and flushes it: the client has it all
// before the filters' done run, as when Envoy destroys a stream.
func (cm *connectionManager) write(w http.ResponseWriter, s *stream) {
	h := w.Header()
	for k, v := range s.respHeader {
		switch canonical(k) {
		case "Content-Length", "Transfer-Encoding", "Connection":
			continue
		case "Content-Type": // net/http's own name, or it adds one
			k = "Content-Type"
		}
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(s.body)))
	w.WriteHeader(s.status)
	_, _ = w.Write(s.body)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	cm.e.log.Debug("envoyemu: response", "path", s.req.URL.Path, "status", s.status)
}

// router is envoy.filters.http.router: a direct response, or the
// route's cluster's answer.
type router struct{ e *Emulator }

func (rt *router) decode(s *stream) bool {
	defer func() {
		for _, hs := range [][]headerToAdd{s.route.responseHeaders, s.vhost.responseHeaders, s.routes.responseHeaders} {
			applyHeaders(hs, s.respHeader, s, formatContext{response: true}, true)
		}
	}()
	if dr := s.route.pb.GetDirectResponse(); dr != nil {
		body := dr.GetBody().GetInlineString()
		if body == "" {
			body = string(dr.GetBody().GetInlineBytes())
		}
		s.localReply(int(dr.GetStatus()), nil, body)
		return true
	}
	ra := s.route.pb.GetRoute()
	c := rt.e.clusters[ra.GetCluster()]
	match := map[string]*structpb.Value{}
	for k, v := range ra.GetMetadataMatch().GetFilterMetadata()["envoy.lb"].GetFields() {
		match[k] = v
	}
	for k, v := range s.dyn["envoy.lb"].GetFields() {
		match[k] = v
	}
	ep := c.pick(match)
	if ep == nil {
		s.localReply(http.StatusServiceUnavailable, nil, "no healthy upstream")
		return true
	}
	s.upstream = ep
	out, err := http.NewRequestWithContext(s.req.Context(), s.req.Method, "http://"+rt.e.dialAddr(ep.addr)+s.req.URL.RequestURI(), s.req.Body)
	if err != nil {
		s.localReply(http.StatusServiceUnavailable, nil, err.Error())
		return true
	}
	out.Header = s.header.Clone()
	out.Host = s.req.Host
	out.ContentLength = s.req.ContentLength
	resp, err := upstreamClient.Do(out)
	if err != nil {
		s.localReply(http.StatusServiceUnavailable, nil, "upstream connect error or disconnect/reset before headers. reset reason: connection failure")
		return true
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.localReply(http.StatusServiceUnavailable, nil, "upstream reset")
		return true
	}
	s.status, s.body, s.respHeader = resp.StatusCode, body, http.Header{}
	for k, v := range resp.Header {
		s.respHeader[lower(k)] = v
	}
	return true
}

func (rt *router) encode(*stream) {}
func (rt *router) done(*stream)   {}

var upstreamClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (e *Emulator) warn(msg string) { e.log.Warn("envoyemu: " + msg) }
