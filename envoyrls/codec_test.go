package envoyrls

import (
	"bytes"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// codecSeeds are requests and byte strings that reach each of the decoder's
// branches: the common request, every field, unknown fields at every level
// (and known fields of another wire type, which are unknown too), a message
// field given twice (merged), and malformed input of each kind.
func codecSeeds(tb testing.TB) [][]byte {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	common := marshal(&rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("allow", "subject-17")}}}})
	full := marshal(&rlspb.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("a", "1"), entry("b", ""), entry("", "c")},
			Limit:      &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)},
			HitsAddend: wrapperspb.UInt64(0), IsNegativeHits: true},
		{},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("k1", "v1"), entry("k2", "v2"), entry("k3", "v3"), entry("k4", "v4"), entry("k5", "ü")}},
	}})
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	msg := func(num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(tag(nil, num, protowire.BytesType), inner)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	unknownVarint := protowire.AppendVarint(tag(nil, 9, protowire.VarintType), 300)
	unknownGroup := cat(tag(nil, 10, protowire.StartGroupType), unknownVarint, tag(nil, 10, protowire.EndGroupType))
	unknownFixed := protowire.AppendFixed32(tag(nil, 11, protowire.Fixed32Type), 1)
	entryBytes := cat(msg(1, []byte("k")), msg(2, []byte("v")))
	override := cat(protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 10), protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 1<<40))
	return [][]byte{
		nil,
		common,
		full,
		// Unknown fields and known fields of another wire type, everywhere.
		cat(common, unknownVarint, unknownGroup, unknownFixed, protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1)),
		msg(2, cat(msg(1, cat(entryBytes, unknownVarint, protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 2))), unknownFixed,
			msg(2, cat(override, unknownVarint, msg(3, cat(protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1<<33), unknownGroup)))),
			msg(3, cat(protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1<<63), unknownVarint)),
			protowire.AppendVarint(tag(nil, 4, protowire.VarintType), 2), msg(4, nil))),
		// A message field given twice merges; a scalar's last value wins.
		msg(2, cat(msg(2, cat(override, unknownVarint)), msg(2, cat(unknownFixed, protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 3))), msg(3, nil), msg(3, unknownVarint))),
		cat(msg(1, []byte("a")), msg(1, []byte("b")), protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 1<<35)),
		// A tag not in its shortest form is kept re-encoded.
		cat(common, []byte{0x88, 0x80, 0x00, 0x01}),
		// Malformed: invalid UTF-8, truncations, field 0, a field number past
		// the maximum, an unmatched or unclosed group, wire types 6 and 7.
		msg(1, []byte{0xff}),
		msg(2, msg(1, msg(2, []byte{0xc3}))),
		common[:len(common)-1],
		{0x12, 0x05, 0x0a},
		{0x00, 0x01},
		protowire.AppendVarint(tag(nil, protowire.MaxValidNumber, protowire.VarintType), 1),
		protowire.AppendVarint(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3), 1),
		tag(nil, 5, protowire.EndGroupType),
		tag(nil, 5, protowire.StartGroupType),
		cat(tag(nil, 5, protowire.StartGroupType), tag(nil, 6, protowire.EndGroupType)),
		{0x0e}, {0x0f},
		msg(2, tag(nil, 1, protowire.EndGroupType)),
		{0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
	}
}

// FuzzDecodeRateLimitRequest holds decodeRateLimitRequest to proto.Unmarshal:
// an error for the same inputs, and otherwise the same message, unknown
// fields' bytes included (compared through Marshal, which writes them
// verbatim).
func FuzzDecodeRateLimitRequest(f *testing.F) {
	for _, s := range codecSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(rlspb.RateLimitRequest)
		wantErr := proto.Unmarshal(b, want)
		// A message decoded into is reset first, as by proto.Unmarshal.
		got := &rlspb.RateLimitRequest{Domain: "stale", HitsAddend: 9, Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}
		gotErr := decodeRateLimitRequest(b, got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("input %x: proto.Unmarshal: %v; decodeRateLimitRequest: %v", b, wantErr, gotErr)
		}
		if wantErr != nil {
			return
		}
		if !proto.Equal(want, got) {
			t.Fatalf("input %x:\nproto.Unmarshal:        %v\ndecodeRateLimitRequest: %v", b, want, got)
		}
		wb, err1 := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		gb, err2 := proto.MarshalOptions{Deterministic: true}.Marshal(got)
		if err1 != nil || err2 != nil || !bytes.Equal(wb, gb) {
			t.Fatalf("input %x: re-encoded %x (%v), want %x (%v)", b, gb, err2, wb, err1)
		}
		// Appending to a descriptor's entries never reaches another's.
		for _, d := range got.GetDescriptors() {
			if len(d.Entries) != cap(d.Entries) {
				t.Fatalf("input %x: a descriptor's entries have room past their end (%d of %d)", b, len(d.Entries), cap(d.Entries))
			}
		}
	})
}

// TestRLSCodec: the codec decodes a RateLimitRequest split across buffers,
// refuses a malformed one, and hands every other message to the standard
// codec both ways.
func TestRLSCodec(t *testing.T) {
	c := rlsCodec{}
	if c.Name() != "proto" {
		t.Fatalf("name %q, want proto (the content-subtype Envoy sends)", c.Name())
	}
	want := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	split := mem.BufferSlice{mem.SliceBuffer(b[:3]), mem.SliceBuffer(b[3:])}
	got := new(rlspb.RateLimitRequest)
	if err := c.Unmarshal(split, got); err != nil || !proto.Equal(got, want) {
		t.Fatalf("decoded %v (%v), want %v", got, err, want)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:len(b)-1])}, new(rlspb.RateLimitRequest)); err == nil {
		t.Fatal("a truncated request decoded without error")
	}

	hreq := &healthpb.HealthCheckRequest{Service: "ratelimit"}
	data, err := c.Marshal(hreq)
	if err != nil {
		t.Fatal(err)
	}
	hgot := new(healthpb.HealthCheckRequest)
	if err := c.Unmarshal(data, hgot); err != nil || !proto.Equal(hgot, hreq) {
		t.Fatalf("health request through the codec: %v (%v), want %v", hgot, err, hreq)
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: rlspb.RateLimitResponse_OK, LimitRemaining: 4}}}
	data, err = c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, _ := proto.Marshal(resp)
	if gotBytes := data.Materialize(); !bytes.Equal(gotBytes, wantBytes) {
		t.Fatalf("response encoded %x, want %x", gotBytes, wantBytes)
	}
}

// BenchmarkDecodeRateLimitRequest compares the decoder with proto.Unmarshal
// on the request Envoy commonly sends.
func BenchmarkDecodeRateLimitRequest(b *testing.B) {
	req, err := proto.Marshal(&rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "allow", Value: "subject-17"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protowire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeRateLimitRequest(req, new(rlspb.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(req, new(rlspb.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
