package check

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelabs/sluice/metrics"
)

// Span and attribute names of a check, as docs/operations.md lists them.
const (
	spanCheck         = "sluice.check"
	attrTenant        = attribute.Key("sluice.tenant")
	attrDomain        = attribute.Key("sluice.domain")
	attrRule          = attribute.Key("sluice.rule")
	attrCost          = attribute.Key("sluice.cost")
	attrDecision      = attribute.Key("sluice.decision")
	attrDenyCacheHit  = attribute.Key("sluice.deny_cache_hit")
	attrStoreCalled   = attribute.Key("sluice.store.called")
	attrStoreDuration = attribute.Key("sluice.store.duration_ms")
)

// tracerName is the instrumentation scope of the engine's spans.
const tracerName = "github.com/sluicelabs/sluice/check"

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// checkTrace collects, during one traced check, what only the inside of
// Check knows. A nil *checkTrace (tracing off) records nothing and reads no
// clock.
type checkTrace struct {
	storeCalled bool
	storeTime   time.Duration
}

func (t *checkTrace) start() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

func (t *checkTrace) stored(start time.Time) {
	if t == nil {
		return
	}
	t.storeCalled = true
	t.storeTime = time.Since(start)
}

// tracedCheck is Check with a span around it: one span per check, whichever
// face asked, child of the face's own span (an HTTP or gRPC server span
// that took the caller's trace context). The subject is not recorded: it is
// often a user's identity.
func (e *Engine) tracedCheck(ctx context.Context, q Query) (Result, error) {
	r := q.Rule
	ctx, span := e.tracer.Start(ctx, spanCheck, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	var tr checkTrace
	res, err := e.check(ctx, q, &tr)

	attrs := make([]attribute.KeyValue, 0, 8)
	if r.labels.Tenant != "" {
		attrs = append(attrs, attrTenant.String(r.labels.Tenant))
	}
	if r.labels.Domain != "" {
		attrs = append(attrs, attrDomain.String(r.labels.Domain))
	}
	attrs = append(attrs,
		attrRule.String(r.Name),
		attrCost.Int64(q.Cost),
		attrDenyCacheHit.Bool(res.Cached),
		attrStoreCalled.Bool(tr.storeCalled),
	)
	if tr.storeCalled {
		attrs = append(attrs, attrStoreDuration.Float64(float64(tr.storeTime)/float64(time.Millisecond)))
	}
	if err != nil {
		decision := metrics.ResultError
		if errors.Is(err, ErrOverloaded) {
			decision = metrics.ResultShed
		}
		attrs = append(attrs, attrDecision.String(decision))
		span.SetAttributes(attrs...)
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return res, err
	}
	attrs = append(attrs, attrDecision.String(res.Outcome.String()))
	span.SetAttributes(attrs...)
	return res, nil
}

// String names an outcome as sluice_decisions_total's result label does.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return metrics.ResultAllowed
	case Denied:
		return metrics.ResultDenied
	case ShadowDenied:
		return metrics.ResultShadowDenied
	case Degraded:
		return metrics.ResultDegraded
	}
	return "unknown"
}
