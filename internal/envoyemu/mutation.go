package envoyemu

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	headertometadatav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// headerMutation is envoy.filters.http.header_mutation: headers added
// (with formatted values) or removed, on the request and the response.
type headerMutation struct {
	request, response []mutation
}

type mutation struct {
	remove string
	add    *headerToAdd
}

func newHeaderMutation(c *headermutationv3.HeaderMutation) (*headerMutation, error) {
	m := c.GetMutations()
	if len(m.GetQueryParameterMutations()) > 0 || len(m.GetRequestTrailersMutations()) > 0 || len(m.GetResponseTrailersMutations()) > 0 {
		return nil, errors.New("only request_mutations and response_mutations are emulated")
	}
	req, err := newMutations(m.GetRequestMutations())
	if err != nil {
		return nil, fmt.Errorf("request_mutations: %w", err)
	}
	resp, err := newMutations(m.GetResponseMutations())
	if err != nil {
		return nil, fmt.Errorf("response_mutations: %w", err)
	}
	return &headerMutation{request: req, response: resp}, nil
}

func newMutations(ms []*mutationv3.HeaderMutation) ([]mutation, error) {
	var out []mutation
	for _, m := range ms {
		switch a := m.GetAction().(type) {
		case *mutationv3.HeaderMutation_Remove:
			out = append(out, mutation{remove: a.Remove})
		case *mutationv3.HeaderMutation_Append:
			add, err := headersToAdd([]*corev3.HeaderValueOption{a.Append})
			if err != nil {
				return nil, err
			}
			out = append(out, mutation{add: &add[0]})
		default:
			return nil, fmt.Errorf("mutation %T is not emulated", a)
		}
	}
	return out, nil
}

func (m *headerMutation) decode(s *stream) bool {
	apply(m.request, s.header, s, formatContext{}, false)
	return false
}

func (m *headerMutation) encode(s *stream) {
	apply(m.response, s.respHeader, s, formatContext{response: true}, true)
}

func (m *headerMutation) done(*stream) {}

func apply(ms []mutation, h http.Header, s *stream, ctx formatContext, lowerKeys bool) {
	for _, m := range ms {
		if m.add == nil {
			delete(h, canonical(m.remove))
			delete(h, lower(m.remove))
			continue
		}
		applyHeaders([]headerToAdd{*m.add}, h, s, ctx, lowerKeys)
	}
}

// headerToMetadata is envoy.filters.http.header_to_metadata: a header's
// value (or a fixed one) set as dynamic metadata.
type headerToMetadata struct {
	request, response []*headertometadatav3.Config_Rule
}

func newHeaderToMetadata(c *headertometadatav3.Config) (*headerToMetadata, error) {
	for _, rules := range [][]*headertometadatav3.Config_Rule{c.GetRequestRules(), c.GetResponseRules()} {
		for _, r := range rules {
			if r.GetCookie() != "" {
				return nil, errors.New("cookie rules are not emulated")
			}
			for _, kv := range []*headertometadatav3.Config_KeyValuePair{r.GetOnHeaderPresent(), r.GetOnHeaderMissing()} {
				if kv.GetRegexValueRewrite() != nil || kv.GetEncode() != headertometadatav3.Config_NONE || kv.GetType() == headertometadatav3.Config_PROTOBUF_VALUE {
					return nil, errors.New("regex_value_rewrite, encode and PROTOBUF_VALUE are not emulated")
				}
			}
		}
	}
	return &headerToMetadata{request: c.GetRequestRules(), response: c.GetResponseRules()}, nil
}

func (m *headerToMetadata) decode(s *stream) bool {
	toMetadata(m.request, s.header, s)
	return false
}

func (m *headerToMetadata) encode(s *stream) { toMetadata(m.response, s.respHeader, s) }

func (m *headerToMetadata) done(*stream) {}

func toMetadata(rules []*headertometadatav3.Config_Rule, h http.Header, s *stream) {
	for _, r := range rules {
		vals, ok := h[canonical(r.GetHeader())]
		if !ok {
			vals, ok = h[lower(r.GetHeader())]
		}
		if ok && len(vals) > 0 && vals[0] != "" {
			if kv := r.GetOnHeaderPresent(); kv != nil {
				setMetadata(s, kv, orDefault(kv.GetValue(), vals[0]))
			}
			if r.GetRemove() {
				delete(h, canonical(r.GetHeader()))
				delete(h, lower(r.GetHeader()))
			}
		} else if kv := r.GetOnHeaderMissing(); kv != nil && kv.GetValue() != "" {
			setMetadata(s, kv, kv.GetValue())
		}
	}
}

func setMetadata(s *stream, kv *headertometadatav3.Config_KeyValuePair, v string) {
	var val *structpb.Value
	if kv.GetType() == headertometadatav3.Config_NUMBER {
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return // Envoy skips a value that is not a number
		}
		val = structpb.NewNumberValue(n)
	} else {
		val = structpb.NewStringValue(v)
	}
	ns := orDefault(kv.GetMetadataNamespace(), "envoy.filters.http.header_to_metadata")
	s.setDynamic(ns, &structpb.Struct{Fields: map[string]*structpb.Value{kv.GetKey(): val}})
}
