package loadgen

import (
	"context"
	"fmt"
	"time"
)

// OverloadOptions configure a search for a target's edge.
type OverloadOptions struct {
	// Options of every step: Rate is the first step's rate (required),
	// Duration each step's length. CPU, if set, is read around each step.
	Options
	// Factor multiplies the rate from one step to the next (above 1).
	Factor float64
	// MaxRate ends the search: no step goes above it.
	MaxRate float64
	// P99 is the latency a step's 99th percentile must stay under.
	P99 time.Duration
}

// Step is one open-model run at one rate.
type Step struct {
	Rate   float64
	Result Result
	// Healthy is true when the step kept p99 under the threshold with no
	// failed, shed or dropped request.
	Healthy bool
	// Beyond marks the final step, at twice the edge.
	Beyond bool
}

// Overload is what a search measured.
type Overload struct {
	Steps []Step
	// Edge is the highest rate whose step was healthy (0: the first step
	// was not).
	Edge float64
	// Bounded is true when the search stopped at MaxRate with every step
	// healthy: the true edge is at or above Edge.
	Bounded bool
}

// Healthy reports whether a step stayed within the edge's criteria: p99
// under p99 and every request answered, with none failed, shed or left queued
// at the end. Shed requests count against the edge too: a service that
// refuses work is past what it can serve.
func Healthy(r Result, p99 time.Duration) bool {
	return r.Errors == 0 && r.Shed == 0 && r.Dropped == 0 && r.Answered() > 0 && r.Percentile(0.99) < p99
}

// RunOverload steps the open model's arrival rate up from opts.Rate, times
// opts.Factor a step, until a step is not healthy (see Healthy) or the next
// rate would pass opts.MaxRate. If a step was unhealthy after a healthy one,
// it then runs one more step at twice the edge, to show what overload does to
// the service. onStep, if set, is called after each step.
func RunOverload(ctx context.Context, target Target, opts OverloadOptions, onStep func(Step)) (Overload, error) {
	switch {
	case opts.Rate <= 0:
		return Overload{}, fmt.Errorf("overload: the starting rate must be positive, got %v", opts.Rate)
	case opts.Factor <= 1:
		return Overload{}, fmt.Errorf("overload: the step factor must be above 1, got %v", opts.Factor)
	case opts.MaxRate < opts.Rate:
		return Overload{}, fmt.Errorf("overload: the maximum rate %v is below the starting rate %v", opts.MaxRate, opts.Rate)
	case opts.P99 <= 0:
		return Overload{}, fmt.Errorf("overload: the p99 threshold must be positive, got %v", opts.P99)
	}
	var o Overload
	step := func(rate float64, beyond bool) (Step, error) {
		run := opts.Options
		run.Rate = rate
		res, err := Run(ctx, target, run)
		if err != nil {
			return Step{}, err
		}
		s := Step{Rate: rate, Result: res, Healthy: Healthy(res, opts.P99), Beyond: beyond}
		o.Steps = append(o.Steps, s)
		if onStep != nil {
			onStep(s)
		}
		return s, nil
	}
	for rate := opts.Rate; ; rate *= opts.Factor {
		s, err := step(rate, false)
		if err != nil {
			return o, err
		}
		if ctx.Err() != nil {
			return o, context.Cause(ctx)
		}
		if !s.Healthy {
			break
		}
		o.Edge = rate
		if rate*opts.Factor > opts.MaxRate {
			o.Bounded = true
			return o, nil
		}
	}
	if o.Edge == 0 {
		return o, nil
	}
	if _, err := step(2*o.Edge, true); err != nil {
		return o, err
	}
	return o, context.Cause(ctx)
}
