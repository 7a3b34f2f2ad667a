package envoyrls

import (
	"errors"
	"unicode/utf8"
	"unsafe"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsCodec is the gRPC server's codec (grpc.ForceServerCodecV2): the
// standard proto codec, except that a RateLimitRequest is decoded by
// decodeRateLimitRequest and a RateLimitResponse always encoded into a
// pooled buffer. Every other message (health checking, anything
// else registered on the server) goes to the standard codec unchanged.
type rlsCodec struct{}

// protoCodec is grpc-go's own proto codec, which rlsCodec falls back to.
var protoCodec = encoding.GetCodecV2(proto.Name)

func (rlsCodec) Name() string { return proto.Name }

// Marshal encodes a RateLimitResponse with the standard marshaller into a
// pooled buffer, which gRPC returns to the pool once written: the standard
// codec pools only messages of 1 KiB and more, and a response is some tens
// of bytes, which cost three allocations there (the bytes, their Buffer and
// the slice).
func (rlsCodec) Marshal(v any) (mem.BufferSlice, error) {
	resp, ok := v.(*rlspb.RateLimitResponse)
	if !ok {
		return protoCodec.Marshal(v)
	}
	// UseCachedSize reuses the sizes proto.Size just computed, as the
	// standard codec does.
	size := gproto.Size(resp)
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	out, err := gproto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], resp)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlspb.RateLimitRequest)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	// The decoder copies every string it keeps, so the buffer may go back
	// to the pool.
	return decodeRateLimitRequest(buf.ReadOnlyData(), req)
}

// errDecode is the decoder's error for input proto.Unmarshal also refuses:
// truncated, an invalid tag or wire type, an unmatched group, or a string
// that is not UTF-8.
var errDecode = errors.New("the RateLimitRequest is not a valid protobuf message")

// smallRequest holds, in one allocation, the storage of the request Envoy
// commonly sends: one descriptor of at most smallEntries entries whose keys
// and values take at most smallStrings bytes. The standard decoder makes an
// allocation per message, per slice and per string.
type smallRequest struct {
	descPtr [1]*ratelimitv3.RateLimitDescriptor
	desc    [1]ratelimitv3.RateLimitDescriptor
	entPtr  [smallEntries]*ratelimitv3.RateLimitDescriptor_Entry
	ent     [smallEntries]ratelimitv3.RateLimitDescriptor_Entry
	strs    [smallStrings]byte
}

const (
	smallEntries = 2
	smallStrings = 64
)

// decodeRateLimitRequest is proto.Unmarshal of a RateLimitRequest without
// reflection: the same message (unknown fields kept as proto.Unmarshal keeps
// them, a known field with another wire type being one), and an error for
// exactly the inputs proto.Unmarshal refuses (FuzzDecodeRateLimitRequest
// checks both). A first pass counts descriptors and entries, so their
// messages and slices are allocated together, and every entry's key and
// value share one allocation (so a string kept keeps its request's entries'
// bytes, at most the request's size). The domain gets its own, as it may
// outlive the request (per-domain statistics).
func decodeRateLimitRequest(b []byte, m *rlspb.RateLimitRequest) error {
	m.Reset()
	descs, entries, strBytes := countRequest(b)
	var d decoder
	if descs == 1 && entries <= smallEntries && strBytes <= smallStrings {
		s := new(smallRequest)
		d.descPtr, d.desc = s.descPtr[:0], s.desc[:]
		d.entPtr, d.ent = s.entPtr[:0], s.ent[:entries]
		d.strs = s.strs[:0]
	} else {
		if descs > 0 {
			d.descPtr = make([]*ratelimitv3.RateLimitDescriptor, 0, descs)
			d.desc = make([]ratelimitv3.RateLimitDescriptor, descs)
		}
		if entries > 0 {
			d.entPtr = make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, entries)
			d.ent = make([]ratelimitv3.RateLimitDescriptor_Entry, entries)
		}
		if strBytes > 0 {
			d.strs = make([]byte, 0, strBytes)
		}
	}
	return d.request(b, m)
}

// countRequest counts the descriptors and entries the request carries and
// bounds the bytes of their strings. On malformed input it stops early:
// the counts are only sizes to allocate, and decoding finds the error.
func countRequest(b []byte) (descs, entries, strBytes int) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		if num != 2 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return
			}
			b = b[n:]
			continue
		}
		desc, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return
		}
		b = b[n:]
		descs++
		for len(desc) > 0 {
			num, typ, n := protowire.ConsumeTag(desc)
			if n < 0 {
				return
			}
			desc = desc[n:]
			n = protowire.ConsumeFieldValue(num, typ, desc)
			if n < 0 {
				return
			}
			if num == 1 && typ == protowire.BytesType {
				entries++
				strBytes += n // the entry's bytes bound its strings'
			}
			desc = desc[n:]
		}
	}
	return
}

// decoder carries the storage countRequest sized. Appends past it (which
// only a miscount could cause) fall back to ordinary allocation.
type decoder struct {
	descPtr []*ratelimitv3.RateLimitDescriptor
	desc    []ratelimitv3.RateLimitDescriptor
	entPtr  []*ratelimitv3.RateLimitDescriptor_Entry
	ent     []ratelimitv3.RateLimitDescriptor_Entry
	// strs holds the entries' keys and values, each written once and never
	// again, so that it backs their strings without a copy (as
	// strings.Builder does); a string that does not fit is allocated.
	strs []byte
}

// field is one field of a message: its number, wire type and, for an
// unknown field, the bytes proto.Unmarshal would keep.
type field struct {
	num protowire.Number
	typ protowire.Type
	// val is the field's value: a varint's or a length-delimited field's
	// contents; raw is the whole value as it stood (for unknown fields).
	varint uint64
	bytes  []byte
	raw    []byte
}

// next reads one field off b, as proto.Unmarshal's loop does: a field
// number out of range, an end of group with no group open or a truncated
// value is an error.
func next(b []byte) (f field, rest []byte, err error) {
	tag, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return f, nil, errDecode
	}
	b = b[n:]
	if num := tag >> 3; num < uint64(protowire.MinValidNumber) || num > uint64(protowire.MaxValidNumber) {
		return f, nil, errDecode
	}
	f.num, f.typ = protowire.Number(tag>>3), protowire.Type(tag&7)
	if f.typ == protowire.EndGroupType {
		return f, nil, errDecode
	}
	switch f.typ {
	case protowire.VarintType:
		f.varint, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(b)
	default:
		n = protowire.ConsumeFieldValue(f.num, f.typ, b)
	}
	if n < 0 {
		return f, nil, errDecode
	}
	f.raw = b[:n]
	return f, b[n:], nil
}

// unknown is the field as proto.Unmarshal keeps it among unknown fields:
// the tag re-encoded, then the value's bytes.
func (f field) unknown(u []byte) []byte {
	return append(protowire.AppendTag(u, f.num, f.typ), f.raw...)
}

func (d *decoder) request(b []byte, m *rlspb.RateLimitRequest) error {
	var u []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			if !utf8.Valid(f.bytes) {
				return errDecode
			}
			m.Domain = string(f.bytes)
		case f.num == 2 && f.typ == protowire.BytesType:
			desc := d.newDescriptor()
			if err := d.descriptor(f.bytes, desc); err != nil {
				return err
			}
			d.descPtr = append(d.descPtr, desc)
		case f.num == 3 && f.typ == protowire.VarintType:
			m.HitsAddend = uint32(f.varint)
		default:
			u = f.unknown(u)
		}
	}
	if len(d.descPtr) > 0 {
		m.Descriptors = d.descPtr
	}
	keepUnknown(m.ProtoReflect(), u)
	return nil
}

func (d *decoder) newDescriptor() *ratelimitv3.RateLimitDescriptor {
	if len(d.desc) == 0 {
		return new(ratelimitv3.RateLimitDescriptor)
	}
	desc := &d.desc[0]
	d.desc = d.desc[1:]
	return desc
}

func (d *decoder) descriptor(b []byte, m *ratelimitv3.RateLimitDescriptor) error {
	var u []byte
	// The descriptor's entries are the next run of d.entPtr, capped so that
	// an append to one descriptor's never reaches the next one's.
	start := len(d.entPtr)
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			var e *ratelimitv3.RateLimitDescriptor_Entry
			if len(d.ent) > 0 {
				e, d.ent = &d.ent[0], d.ent[1:]
			} else {
				e = new(ratelimitv3.RateLimitDescriptor_Entry)
			}
			if err := d.entry(f.bytes, e); err != nil {
				return err
			}
			d.entPtr = append(d.entPtr, e)
		case f.num == 2 && f.typ == protowire.BytesType:
			if m.Limit == nil {
				m.Limit = new(ratelimitv3.RateLimitDescriptor_RateLimitOverride)
			}
			if err := decodeOverride(f.bytes, m.Limit); err != nil {
				return err
			}
		case f.num == 3 && f.typ == protowire.BytesType:
			if m.HitsAddend == nil {
				m.HitsAddend = new(wrapperspb.UInt64Value)
			}
			if err := uint64Value(f.bytes, m.HitsAddend); err != nil {
				return err
			}
		case f.num == 4 && f.typ == protowire.VarintType:
			m.IsNegativeHits = protowire.DecodeBool(f.varint)
		default:
			u = f.unknown(u)
		}
	}
	if end := len(d.entPtr); end > start {
		m.Entries = d.entPtr[start:end:end]
	}
	keepUnknown(m.ProtoReflect(), u)
	return nil
}

func (d *decoder) entry(b []byte, m *ratelimitv3.RateLimitDescriptor_Entry) error {
	var u []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case (f.num == 1 || f.num == 2) && f.typ == protowire.BytesType:
			if !utf8.Valid(f.bytes) {
				return errDecode
			}
			s := d.str(f.bytes)
			if f.num == 1 {
				m.Key = s
			} else {
				m.Value = s
			}
		default:
			u = f.unknown(u)
		}
	}
	keepUnknown(m.ProtoReflect(), u)
	return nil
}

// keepUnknown appends u to m's unknown fields, as proto.Unmarshal does
// (after those of an earlier occurrence of the same message field).
func keepUnknown(m protoreflect.Message, u []byte) {
	if u != nil {
		m.SetUnknown(append(m.GetUnknown(), u...))
	}
}

// str is b as a string in the shared allocation.
func (d *decoder) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	start := len(d.strs)
	if cap(d.strs)-start < len(b) {
		return string(b)
	}
	d.strs = append(d.strs, b...)
	return unsafe.String(&d.strs[start], len(b))
}

func decodeOverride(b []byte, m *ratelimitv3.RateLimitDescriptor_RateLimitOverride) error {
	var u []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			m.RequestsPerUnit = uint32(f.varint)
		case f.num == 2 && f.typ == protowire.VarintType:
			m.Unit = typev3.RateLimitUnit(int32(f.varint))
		case f.num == 3 && f.typ == protowire.BytesType:
			if m.UnitMultiplier == nil {
				m.UnitMultiplier = new(wrapperspb.UInt32Value)
			}
			if err := uint32Value(f.bytes, m.UnitMultiplier); err != nil {
				return err
			}
		default:
			u = f.unknown(u)
		}
	}
	keepUnknown(m.ProtoReflect(), u)
	return nil
}

func uint64Value(b []byte, m *wrapperspb.UInt64Value) error {
	return wrappedVarint(b, m, func(v uint64) { m.Value = v })
}

func uint32Value(b []byte, m *wrapperspb.UInt32Value) error {
	return wrappedVarint(b, m, func(v uint64) { m.Value = uint32(v) })
}

// wrappedVarint decodes a wrapper message of one varint field (number 1)
// into m, through set.
func wrappedVarint(b []byte, m gproto.Message, set func(uint64)) error {
	var u []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		if f.num == 1 && f.typ == protowire.VarintType {
			set(f.varint)
		} else {
			u = f.unknown(u)
		}
	}
	keepUnknown(m.ProtoReflect(), u)
	return nil
}
