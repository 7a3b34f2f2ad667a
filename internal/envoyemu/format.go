package envoyemu

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
)

// A format is one of Envoy's substitution format strings, of the commands
// the emulated filters need: %REQ(header)%, %RESP(header)% and
// %DYNAMIC_METADATA(namespace:key:...)%; another command is refused.
type format []formatPart

type formatPart struct {
	literal string
	command string   // REQ, RESP or DYNAMIC_METADATA; "" for a literal
	args    []string // the header and its alternative, or namespace and path
}

func parseFormat(s string) (format, error) {
	var f format
	for len(s) > 0 {
		i := strings.IndexByte(s, '%')
		if i < 0 {
			f = append(f, formatPart{literal: s})
			break
		}
		if i > 0 {
			f = append(f, formatPart{literal: s[:i]})
		}
		s = s[i+1:]
		if strings.HasPrefix(s, "%") { // %% is a percent sign
			f = append(f, formatPart{literal: "%"})
			s = s[1:]
			continue
		}
		j := strings.IndexByte(s, '%')
		if j < 0 {
			return nil, fmt.Errorf("format %q: a %% opens a command that no %% closes", s)
		}
		cmd := s[:j]
		s = s[j+1:]
		open, closing := strings.IndexByte(cmd, '('), strings.LastIndexByte(cmd, ')')
		if open < 0 || closing < open {
			return nil, fmt.Errorf("format command %%%s%% is not emulated (REQ, RESP and DYNAMIC_METADATA are)", cmd)
		}
		name, arg := cmd[:open], cmd[open+1:closing]
		switch name {
		case "REQ", "RESP":
			f = append(f, formatPart{command: name, args: strings.SplitN(arg, "?", 2)})
		case "DYNAMIC_METADATA":
			f = append(f, formatPart{command: name, args: strings.Split(arg, ":")})
		default:
			return nil, fmt.Errorf("format command %%%s%% is not emulated (REQ, RESP and DYNAMIC_METADATA are)", cmd)
		}
	}
	return f, nil
}

// value is what a one-part format gives: the command's value, nil when
// it is not available.
func (f format) value(s *stream, ctx formatContext) *structpb.Value {
	if len(f) != 1 {
		return structpb.NewStringValue(f.text(s, ctx))
	}
	p := f[0]
	switch p.command {
	case "":
		return structpb.NewStringValue(p.literal)
	case "REQ", "RESP":
		h := s.header
		if p.command == "RESP" {
			if !ctx.response {
				return nil
			}
			h = s.respHeader
		}
		for _, name := range p.args {
			if v := h.Values(name); len(v) > 0 {
				return structpb.NewStringValue(v[0])
			}
		}
		return nil
	default: // DYNAMIC_METADATA
		v := s.dyn[p.args[0]]
		if v == nil {
			return nil
		}
		cur := structpb.NewStructValue(v)
		for _, k := range p.args[1:] {
			next, ok := cur.GetStructValue().GetFields()[k]
			if !ok {
				return nil
			}
			cur = next
		}
		return cur
	}
}

// text is the format as a header value: each command's value as text, a
// missing one empty (Envoy omits empty values in headers).
func (f format) text(s *stream, ctx formatContext) string {
	var b strings.Builder
	for _, p := range f {
		if p.command == "" {
			b.WriteString(p.literal)
			continue
		}
		b.WriteString(valueText(format{p}.value(s, ctx)))
	}
	return b.String()
}

// formatContext says what the format may read: response headers are
// there only once the response has begun, and never for a rate limit
// descriptor's hits_addend, which Envoy formats with the request's
// headers alone.
type formatContext struct{ response bool }

func valueText(v *structpb.Value) string {
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return ""
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(k.NumberValue, 'f', -1, 64)
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue)
	default:
		b, _ := v.MarshalJSON()
		return string(b)
	}
}
