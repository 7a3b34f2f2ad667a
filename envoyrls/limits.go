package envoyrls

import (
	"math"
	"runtime"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Bounds on one ShouldRateLimit request, gRPC and POST /json alike. Without
// them a request's size was the only bound on its work: one 64 KiB POST /json
// made 1,500 store calls, one gRPC request 100,000. Each is far above what
// Envoy sends: one descriptor per rate_limits entry of the route (and of its
// virtual host), one entry per action of that entry, typically fewer than 10
// of each. envoyproxy/ratelimit sets no bound of its own.
const (
	// MaxDescriptors is the most descriptors one request may carry, and so
	// the most store calls it can cause.
	MaxDescriptors = 64
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 32
	// MaxKeyBytes bounds an entry's key: keys are names from Envoy's
	// configuration (descriptor_key), never request data.
	MaxKeyBytes = 1 << 10
	// MaxValueBytes bounds an entry's value. Values are request data, such
	// as a header: Envoy's default max_request_headers_kb is 60, so no header
	// it forwards by default is longer. It also keeps one value under
	// sluice.MaxSubjectBytes, which the counters' subject may not exceed.
	MaxValueBytes = 60 << 10
	// MaxHitsAddend bounds a descriptor's hits_addend. It is the range of
	// the request's own hits_addend (a uint32) and of requests_per_unit, so
	// no cost Envoy can send through the request field is refused, and no
	// rule written in envoyproxy/ratelimit's terms could ever admit more.
	MaxHitsAddend = math.MaxUint32
)

// validateRequest refuses a request past the bounds above before any work is
// done for it: no rule is made and no store is called.
func validateRequest(req *rlspb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return status.Error(codes.InvalidArgument, "the request has no descriptors; Envoy sends at least one per rate limit action")
	}
	if len(descs) > MaxDescriptors {
		return status.Errorf(codes.InvalidArgument, "the request has %d descriptors; at most %d are accepted (Envoy sends one per rate_limits entry of the route)", len(descs), MaxDescriptors)
	}
	for i, desc := range descs {
		// A descriptor without entries matches no rule: OK, as in
		// envoyproxy/ratelimit.
		entries := desc.GetEntries()
		if len(entries) > MaxEntries {
			return status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries; at most %d are accepted", i, len(entries), MaxEntries)
		}
		for j, e := range entries {
			if n := len(e.GetKey()); n > MaxKeyBytes {
				return status.Errorf(codes.InvalidArgument, "descriptor %d, entry %d: the key is %d bytes long; at most %d are accepted", i, j, n, MaxKeyBytes)
			}
			if n := len(e.GetValue()); n > MaxValueBytes {
				return status.Errorf(codes.InvalidArgument, "descriptor %d, entry %d: the value is %d bytes long; at most %d are accepted", i, j, n, MaxValueBytes)
			}
		}
		if h := desc.GetHitsAddend(); h != nil && h.GetValue() > MaxHitsAddend {
			return status.Errorf(codes.InvalidArgument, "descriptor %d has hits_addend %d; at most %d is accepted", i, h.GetValue(), uint64(MaxHitsAddend))
		}
	}
	return nil
}

// gRPC server limits. Go's gRPC server sets no stream limit and a read limit
// of 4 MiB by default, and its default keepalive enforcement (pings at most
// every 5 minutes, none without a call in flight) would close an idle Envoy
// connection that sends keepalives.
const (
	// maxConcurrentStreams per connection, announced in HTTP/2 SETTINGS:
	// clients queue further calls or open another connection.
	maxConcurrentStreams = 1024
	// maxRecvMsgSize is far above a request within the bounds Envoy needs.
	maxRecvMsgSize = 1 << 20
	// keepaliveMinTime is the shortest ping interval accepted: Envoy's
	// connection_keepalive is commonly 10 to 30 s; a faster ping flood gets
	// the connection closed (GOAWAY "too_many_pings").
	keepaliveMinTime = 5 * time.Second
	// maxConnectionIdle closes a connection with no call for this long, so
	// abandoned connections do not accumulate; Envoy reconnects on demand.
	maxConnectionIdle = 10 * time.Minute
	// keepaliveTime and keepaliveTimeout find dead peers: the server pings a
	// connection silent for keepaliveTime and closes it without an answer
	// within keepaliveTimeout.
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// ServerOptions are the gRPC server options fit for the rate limit service:
// many small unary calls. A fixed pool of stream workers serves them instead
// of a goroutine per call whose stack grows on every request (profiles under
// load showed runtime.newstack at 10% of the CPU without it), and small
// messages need no large read and write buffers. Streams per connection,
// message size and keepalives are bounded so one client cannot hold
// unbounded work or connections. Shared write buffers, 32 KiB buffers and
// fixed 1 MiB flow-control windows were each measured and saved no CPU
// (BENCHMARKS.md, issue 29 lever 3), so they are left at these settings.
func ServerOptions() []grpc.ServerOption {
	// (See streamWorkers for the pool's size.)
	return []grpc.ServerOption{
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.ReadBufferSize(16 << 10),
		grpc.WriteBufferSize(16 << 10),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		// RateLimitRequest decoded without reflection (codec.go).
		grpc.ForceServerCodecV2(rlsCodec{}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: keepaliveMinTime,
			// Envoy pings whether or not a call is in flight.
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: maxConnectionIdle,
			Time:              keepaliveTime,
			Timeout:           keepaliveTimeout,
		}),
	}
}

// streamWorkers sizes the pool of stream workers. grpc-go hands a call to a
// new goroutine whenever every worker is busy, and that goroutine's stack
// grows again; so the pool must cover the calls in flight, not the cores:
// with 8 workers and 64 callers, profiles still showed a tenth of the CPU in
// stack growth. An idle worker costs only its stack.
func streamWorkers() uint32 {
	return uint32(max(256, runtime.GOMAXPROCS(0)*64))
}
