// Package accesslog holds what the access logs of `sluice serve` and
// `sluice gateway` share: which records to keep, and how to log failed
// authentications without letting a caller flood the log.
//
// Records are structured (slog) with the message Message; a record never
// holds a credential, a subject or a raw path, only bounded names.
package accesslog

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Message is the message of every access record, so one filter finds them.
const Message = "access"

// DefaultSample is the fraction of successful requests kept when none is
// configured: denials and errors are always kept.
const DefaultSample = 0.01

// Keep reports whether a successful request's record is kept, sampling at
// rate sample (0 keeps none, 1 or more keeps all).
func Keep(sample float64) bool {
	switch {
	case sample <= 0:
		return false
	case sample >= 1:
		return true
	}
	return rand.Float64() < sample
}

// Milliseconds is d in milliseconds, to the microsecond: the unit of every
// duration in access records.
func Milliseconds(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// PeerIP is the connection's peer address without its port: the address
// a server can vouch for.
func PeerIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// AppendTrace appends the trace ID of ctx's span, when it is traced, so a
// record can be found from its trace and back.
func AppendTrace(ctx context.Context, attrs []slog.Attr) []slog.Attr {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	return attrs
}

// Failed authentications are logged at most ThrottleBurst times per
// ThrottleWindow: enough to see who is knocking, never a log flood an
// attacker controls.
const (
	ThrottleBurst  = 10
	ThrottleWindow = 10 * time.Second
)

// Throttle lets through at most Burst events per Window and counts those it
// holds back, so the next record can say how many were left out.
type Throttle struct {
	Burst  int
	Window time.Duration
	// Now is the clock; nil is time.Now. Tests set it.
	Now func() time.Time

	mu          sync.Mutex
	windowStart time.Time
	passed      int
	suppressed  int
}

// NewThrottle returns a Throttle of ThrottleBurst events per ThrottleWindow.
func NewThrottle() *Throttle {
	return &Throttle{Burst: ThrottleBurst, Window: ThrottleWindow}
}

// Allow reports whether an event may be logged now and, when it may, how
// many were held back since the last one that was.
func (t *Throttle) Allow() (ok bool, suppressedBefore int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.Now != nil {
		now = t.Now()
	}
	if now.Sub(t.windowStart) >= t.Window {
		t.windowStart, t.passed = now, 0
	}
	if t.passed >= t.Burst {
		t.suppressed++
		return false, 0
	}
	t.passed++
	suppressedBefore, t.suppressed = t.suppressed, 0
	return true, suppressedBefore
}
