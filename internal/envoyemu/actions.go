package envoyemu

//lint:file-ignore SA1019 Envoy still honours its deprecated fields, so the emulator reads them as Envoy does.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"regexp"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// policy is one rate_limits entry: the actions that compose a descriptor,
// and what is sent with it.
type policy struct {
	stage        uint32
	actions      []action
	onStreamDone bool
	// hitsNumber or hitsFormat is the descriptor's hits_addend; neither:
	// none is sent (the service counts 1).
	hitsNumber *uint64
	hitsFormat format
	// limit is the dynamic metadata key of a limit override.
	limit *metadatav3.MetadataKey
}

// action appends an entry to the descriptor being composed: ok false
// means no descriptor is generated for the policy; an entry with an
// empty key is skipped (skip_if_absent).
type action func(s *stream) (entry *ratelimitv3.RateLimitDescriptor_Entry, ok bool)

// Where a rate_limits entry is configured decides what Envoy reads of it:
// on a route or virtual host (Envoy's router rate limit policy) stage and
// limit apply and hits_addend is ignored; in RateLimitPerRoute or the
// filter's own rate_limits (its common rate limit config) hits_addend
// applies and stage and disable_key are refused.
type policyPlace int

const (
	onRoute policyPlace = iota
	perRouteConfig
	filterConfig
)

func newPolicies(rls []*routev3.RateLimit, place policyPlace, warn func(string)) ([]*policy, error) {
	var out []*policy
	for i, rl := range rls {
		p, err := newPolicy(rl, place, warn)
		if err != nil {
			return nil, fmt.Errorf("rate_limits[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func newPolicy(rl *routev3.RateLimit, place policyPlace, warn func(string)) (*policy, error) {
	p := &policy{stage: rl.GetStage().GetValue(), onStreamDone: rl.GetApplyOnStreamDone()}
	if place != onRoute && (rl.GetStage() != nil || rl.GetDisableKey() != "") {
		return nil, errors.New("'stage' field and 'disable_key' field are not supported here (Envoy refuses them outside a route's or virtual host's rate_limits)")
	}
	if rl.GetLimit() != nil {
		if place == filterConfig {
			return nil, errors.New("'limit' field is not supported in the filter's rate_limits")
		}
		p.limit = rl.GetLimit().GetDynamicMetadata().GetMetadataKey()
		if p.limit == nil {
			return nil, errors.New("only a limit override from dynamic_metadata is emulated")
		}
	}
	if ha := rl.GetHitsAddend(); ha != nil {
		switch {
		case place == onRoute:
			warn("hits_addend on a route's or virtual host's rate_limits is ignored by Envoy (it applies in RateLimitPerRoute or the filter's rate_limits); the descriptor is sent without one")
		case ha.GetIsNegativeHits():
			return nil, errors.New("hits_addend's is_negative_hits is not emulated")
		case ha.GetFormat() != "" && ha.GetNumber() != nil:
			return nil, errors.New("hits_addend must contain either a format or a number")
		case ha.GetFormat() != "":
			f, err := parseFormat(ha.GetFormat())
			if err != nil {
				return nil, err
			}
			if len(f) != 1 {
				return nil, errors.New("hits_addend format must contain exactly one substitution")
			}
			p.hitsFormat = f
		case ha.GetNumber() != nil:
			n := ha.GetNumber().GetValue()
			p.hitsNumber = &n
		default:
			return nil, errors.New("hits_addend must contain either a format or a number")
		}
	}
	for i, a := range rl.GetActions() {
		act, err := newAction(a, place)
		if err != nil {
			return nil, fmt.Errorf("actions[%d]: %w", i, err)
		}
		p.actions = append(p.actions, act)
	}
	return p, nil
}

// maxHitsAddend is the largest hits_addend a format may give, as Envoy.
const maxHitsAddend = 1e9

// descriptor composes the policy's descriptor for s; ok false: none.
func (p *policy) descriptor(s *stream, warn func(string)) (*ratelimitv3.RateLimitDescriptor, bool) {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, act := range p.actions {
		entry, ok := act(s)
		if !ok {
			return nil, false
		}
		if entry.GetKey() != "" {
			d.Entries = append(d.Entries, entry)
		}
	}
	if p.limit != nil {
		if o := limitOverride(metadataValue(s.dynMetadata(), p.limit)); o != nil {
			d.Limit = o
		}
	}
	switch {
	case p.hitsFormat != nil:
		v := p.hitsFormat.value(s, formatContext{})
		var n float64
		ok := true
		switch k := v.GetKind().(type) {
		case *structpb.Value_NumberValue:
			n = k.NumberValue
		case *structpb.Value_StringValue:
			_, err := fmt.Sscanf(strings.TrimSpace(k.StringValue), "%g", &n)
			ok = err == nil
		default:
			ok = false
		}
		if !ok || n < 0 || n > maxHitsAddend {
			warn(fmt.Sprintf("Invalid hits_addend: %v; the descriptor is not sent", valueText(v)))
			return nil, false
		}
		d.HitsAddend = wrapperspb.UInt64(uint64(n))
	case p.hitsNumber != nil:
		d.HitsAddend = wrapperspb.UInt64(*p.hitsNumber)
	}
	return d, true
}

func limitOverride(v *structpb.Value) *ratelimitv3.RateLimitDescriptor_RateLimitOverride {
	f := v.GetStructValue().GetFields()
	rpu, unit := f["requests_per_unit"], f["unit"]
	if _, ok := rpu.GetKind().(*structpb.Value_NumberValue); !ok {
		return nil
	}
	u, ok := typeUnits[unit.GetStringValue()]
	if !ok {
		return nil
	}
	return &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(rpu.GetNumberValue()), Unit: u}
}

func entry(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
	return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
}

func newAction(a *routev3.RateLimit_Action, place policyPlace) (action, error) {
	switch spec := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_SourceCluster_:
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			return entry("source_cluster", s.e.opts.ServiceCluster), true
		}, nil
	case *routev3.RateLimit_Action_DestinationCluster_:
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			return entry("destination_cluster", s.route.pb.GetRoute().GetCluster()), true
		}, nil
	case *routev3.RateLimit_Action_RequestHeaders_:
		rh := spec.RequestHeaders
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			v := s.header.Values(rh.GetHeaderName())
			if len(v) == 0 {
				return nil, rh.GetSkipIfAbsent()
			}
			return entry(rh.GetDescriptorKey(), v[0]), true
		}, nil
	case *routev3.RateLimit_Action_QueryParameters_:
		qp := spec.QueryParameters
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			q := s.req.URL.Query()
			if !q.Has(qp.GetQueryParameterName()) {
				return nil, qp.GetSkipIfAbsent()
			}
			return entry(qp.GetDescriptorKey(), q.Get(qp.GetQueryParameterName())), true
		}, nil
	case *routev3.RateLimit_Action_RemoteAddress_:
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			if !s.remote.IsValid() {
				return nil, false
			}
			return entry("remote_address", s.remote.String()), true
		}, nil
	case *routev3.RateLimit_Action_MaskedRemoteAddress_:
		m := spec.MaskedRemoteAddress
		v4, v6 := 32, 128
		if m.GetV4PrefixMaskLen() != nil {
			v4 = int(m.GetV4PrefixMaskLen().GetValue())
		}
		if m.GetV6PrefixMaskLen() != nil {
			v6 = int(m.GetV6PrefixMaskLen().GetValue())
		}
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			if !s.remote.IsValid() {
				return nil, false
			}
			bits := v6
			if s.remote.Is4() {
				bits = v4
			}
			pfx, err := s.remote.Prefix(bits)
			if err != nil {
				return nil, false
			}
			return entry("masked_remote_address", pfx.String()), true
		}, nil
	case *routev3.RateLimit_Action_GenericKey_:
		g := spec.GenericKey
		key := orDefault(g.GetDescriptorKey(), "generic_key")
		return func(*stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			return entry(key, g.GetDescriptorValue()), true
		}, nil
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		h := spec.HeaderValueMatch
		matchers, err := newHeaderMatchers(h.GetHeaders())
		if err != nil {
			return nil, err
		}
		expect := true
		if h.GetExpectMatch() != nil {
			expect = h.GetExpectMatch().GetValue()
		}
		key := orDefault(h.GetDescriptorKey(), "header_match")
		return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
			if matchAll(matchers, s.header) != expect {
				return nil, false
			}
			return entry(key, h.GetDescriptorValue()), true
		}, nil
	case *routev3.RateLimit_Action_DynamicMetadata:
		if place != onRoute {
			return nil, errors.New("the dynamic_metadata action is not supported here (use metadata)")
		}
		m := spec.DynamicMetadata
		return metadataAction(m.GetMetadataKey(), m.GetDescriptorKey(), m.GetDefaultValue(), false, routev3.RateLimit_Action_MetaData_DYNAMIC), nil
	case *routev3.RateLimit_Action_Metadata:
		m := spec.Metadata
		return metadataAction(m.GetMetadataKey(), m.GetDescriptorKey(), m.GetDefaultValue(), m.GetSkipIfAbsent(), m.GetSource()), nil
	default:
		return nil, fmt.Errorf("the rate limit action %T is not emulated", spec)
	}
}

func metadataAction(key *metadatav3.MetadataKey, descriptorKey, def string, skipIfAbsent bool, source routev3.RateLimit_Action_MetaData_Source) action {
	return func(s *stream) (*ratelimitv3.RateLimitDescriptor_Entry, bool) {
		var md *corev3.Metadata
		switch source {
		case routev3.RateLimit_Action_MetaData_DYNAMIC:
			md = s.dynMetadata()
		case routev3.RateLimit_Action_MetaData_ROUTE_ENTRY:
			md = s.route.pb.GetMetadata()
		case routev3.RateLimit_Action_MetaData_CLUSTER_ENTRY:
			if c := s.e.clusters[s.route.pb.GetRoute().GetCluster()]; c != nil {
				md = c.metadata
			}
		case routev3.RateLimit_Action_MetaData_CLUSTER_LOCALITY_ENTRY:
			// There only once an upstream host was chosen: on stream done.
			if s.upstream != nil {
				md = s.upstream.locality
			}
		}
		if v := metadataValue(md, key).GetStringValue(); v != "" {
			return entry(descriptorKey, v), true
		}
		if def != "" {
			return entry(descriptorKey, def), true
		}
		return nil, skipIfAbsent
	}
}

func metadataValue(md *corev3.Metadata, key *metadatav3.MetadataKey) *structpb.Value {
	st := md.GetFilterMetadata()[key.GetKey()]
	if st == nil {
		return nil
	}
	cur := structpb.NewStructValue(st)
	for _, seg := range key.GetPath() {
		next, ok := cur.GetStructValue().GetFields()[seg.GetKey()]
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

// headerMatcher is a route's or action's HeaderMatcher.
type headerMatcher struct {
	name           string
	match          func(v string) bool // nil: presence alone
	present        bool                // present_match's value
	invert         bool
	missingAsEmpty bool
}

func newHeaderMatchers(hs []*routev3.HeaderMatcher) ([]headerMatcher, error) {
	var out []headerMatcher
	for _, h := range hs {
		m := headerMatcher{name: h.GetName(), invert: h.GetInvertMatch(), missingAsEmpty: h.GetTreatMissingHeaderAsEmpty(), present: true}
		switch spec := h.GetHeaderMatchSpecifier().(type) {
		case nil:
			// No specifier: the header must be present.
		case *routev3.HeaderMatcher_ExactMatch:
			m.match = func(v string) bool { return v == spec.ExactMatch }
		case *routev3.HeaderMatcher_PrefixMatch:
			m.match = func(v string) bool { return strings.HasPrefix(v, spec.PrefixMatch) }
		case *routev3.HeaderMatcher_SuffixMatch:
			m.match = func(v string) bool { return strings.HasSuffix(v, spec.SuffixMatch) }
		case *routev3.HeaderMatcher_ContainsMatch:
			m.match = func(v string) bool { return strings.Contains(v, spec.ContainsMatch) }
		case *routev3.HeaderMatcher_PresentMatch:
			m.present = spec.PresentMatch
		case *routev3.HeaderMatcher_SafeRegexMatch:
			re, err := fullRegexp(spec.SafeRegexMatch.GetRegex())
			if err != nil {
				return nil, err
			}
			m.match = re.MatchString
		case *routev3.HeaderMatcher_StringMatch:
			f, err := stringMatcher(spec.StringMatch)
			if err != nil {
				return nil, err
			}
			m.match = f
		default:
			return nil, fmt.Errorf("header matcher %T is not emulated", spec)
		}
		out = append(out, m)
	}
	return out, nil
}

func matchAll(ms []headerMatcher, h map[string][]string) bool {
	for _, m := range ms {
		if !m.matches(h) {
			return false
		}
	}
	return true
}

func (m headerMatcher) matches(h map[string][]string) bool {
	vals, present := h[canonical(m.name)]
	if !present && m.missingAsEmpty {
		vals, present = []string{""}, true
	}
	var ok bool
	switch {
	case m.match == nil:
		ok = present == m.present
	case !present:
		return false // a missing header matches no value, inverted or not
	default:
		// Several values are matched as Envoy joins them: with commas.
		ok = m.match(strings.Join(vals, ","))
	}
	return ok != m.invert
}

func stringMatcher(sm *matcherv3.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if sm.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return func(v string) bool { return fold(v) == fold(p.Exact) }, nil
	case *matcherv3.StringMatcher_Prefix:
		return func(v string) bool { return strings.HasPrefix(fold(v), fold(p.Prefix)) }, nil
	case *matcherv3.StringMatcher_Suffix:
		return func(v string) bool { return strings.HasSuffix(fold(v), fold(p.Suffix)) }, nil
	case *matcherv3.StringMatcher_Contains:
		return func(v string) bool { return strings.Contains(fold(v), fold(p.Contains)) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := fullRegexp(p.SafeRegex.GetRegex())
		if err != nil {
			return nil, err
		}
		return re.MatchString, nil
	default:
		return nil, fmt.Errorf("string matcher %T is not emulated", p)
	}
}

// fullRegexp compiles an RE2 regex that must match the whole value, as
// Envoy's safe_regex does.
func fullRegexp(expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return nil, fmt.Errorf("safe_regex %q: %w", expr, err)
	}
	return re, nil
}

func canonical(name string) string { return textproto.CanonicalMIMEHeaderKey(name) }

// remoteAddr is the downstream address Envoy's remote_address action
// sees: the peer, or with use_remote_address off the last
// x-forwarded-for entry less the trusted hops, when there is one.
func remoteAddr(peer string, xff []string, useRemote bool, trustedHops uint32) netip.Addr {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		host = peer
	}
	addr, _ := netip.ParseAddr(host)
	if useRemote || len(xff) == 0 {
		return addr.Unmap()
	}
	var hops []string
	for _, v := range xff {
		for _, p := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(p))
		}
	}
	i := len(hops) - 1 - int(trustedHops)
	if i < 0 {
		return addr.Unmap()
	}
	if a, err := netip.ParseAddr(hops[i]); err == nil {
		return a.Unmap()
	}
	return addr.Unmap()
}
