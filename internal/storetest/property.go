package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
)

// NamedStore is a store under test and the name its failures are reported
// under.
type NamedStore struct {
	Name  string
	Store sluice.Store
}

// runs numbers the property runs, so each has a tenant of its own.
var runs atomic.Int64

// MatchesModel drives random sequences of checks through the reference Model
// and every given store and requires identical decisions from all of them:
// time steps that are bursts, boundary-sized, long idle periods and steps
// backwards (a clock corrected by NTP, a failover to a host behind); costs
// that fit, peeks, and invalid costs (negative, or more than a limit can
// ever hold), which every store must refuse with sluice.ErrInvalid and which
// must change nothing; and limits changed mid-sequence (capacities and
// refill rates, as an operator editing a rule), with the semantics the Model
// defines.
func MatchesModel(t *testing.T, stores ...NamedStore) {
	rapid.Check(t, func(rt *rapid.T) {
		limits := drawLimits(rt)
		model := NewModel()
		tenant := fmt.Sprintf("prop-%d", runs.Add(1))
		now := Base.Add(time.Duration(rapid.Int64Range(0, 100_000).Draw(rt, "start")) * time.Millisecond)
		subjects := []string{"alice", "bob"}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			now = now.Add(drawStep(rt))
			if rapid.IntRange(0, 7).Draw(rt, "change limits") == 0 {
				limits = changeLimits(rt, limits)
			}
			minCapacity := limits[0].Capacity
			for _, l := range limits {
				minCapacity = min(minCapacity, l.Capacity)
			}
			req := sluice.Request{
				Tenant:  tenant,
				Rule:    "r",
				Subject: rapid.SampledFrom(subjects).Draw(rt, "subject"),
				Limits:  limits,
				Cost:    drawCost(rt, minCapacity),
				Now:     now,
			}
			invalid := req.Cost < 0 || req.Cost > minCapacity
			var want sluice.Decision
			if !invalid {
				want = model.Check(req)
			}
			for _, s := range stores {
				got, err := s.Store.Check(context.Background(), req)
				switch {
				case invalid && !errors.Is(err, sluice.ErrInvalid):
					rt.Fatalf("step %d, %s: cost %d of limits holding at most %d: got %v, %v; want an error wrapping ErrInvalid",
						i, s.Name, req.Cost, minCapacity, got, err)
				case invalid:
				case err != nil:
					rt.Fatalf("step %d, %s: %v", i, s.Name, err)
				default:
					if diff := compare(want, got); diff != "" {
						rt.Fatalf("step %d, %s at +%dms cost %d for %s: %s\nmodel: %+v\nstore: %+v",
							i, s.Name, now.Sub(Base).Milliseconds(), req.Cost, req.Subject, diff, want, got)
					}
				}
			}
		}
	})
}

var rates = []float64{0.1, 0.5, 1, 2, 3, 7, 10, 1000}

// drawCost is mostly a cost that fits (peeks included), sometimes one that
// never can: negative, or above the smallest capacity.
func drawCost(rt *rapid.T, minCapacity int64) int64 {
	switch rapid.IntRange(0, 9).Draw(rt, "cost kind") {
	case 0:
		return rapid.Int64Range(-3, -1).Draw(rt, "negative cost")
	case 1:
		return rapid.Int64Range(minCapacity+1, minCapacity+3).Draw(rt, "cost too large")
	}
	return rapid.Int64Range(0, minCapacity).Draw(rt, "cost")
}

// changeLimits returns limits with new capacities and refill rates: the same
// names, algorithms and windows, so the same counters.
func changeLimits(rt *rapid.T, limits []sluice.Limit) []sluice.Limit {
	changed := make([]sluice.Limit, len(limits))
	for i, l := range limits {
		l.Capacity = rapid.Int64Range(1, 20).Draw(rt, "new capacity")
		if l.Algorithm == sluice.AlgorithmTokenBucket {
			l.RefillPerSecond = rapid.SampledFrom(rates).Draw(rt, "new rate")
		}
		changed[i] = l
	}
	return changed
}

func drawLimits(rt *rapid.T) []sluice.Limit {
	n := rapid.IntRange(1, 3).Draw(rt, "limits")
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second, 3 * time.Second}
	limits := make([]sluice.Limit, n)
	for i := range limits {
		capacity := rapid.Int64Range(1, 20).Draw(rt, "capacity")
		switch rapid.IntRange(0, 2).Draw(rt, "algorithm") {
		case 0:
			limits[i] = sluice.TokenBucket(capacity, rapid.SampledFrom(rates).Draw(rt, "rate"))
		case 1:
			limits[i] = sluice.SlidingWindow(capacity, rapid.SampledFrom(windows).Draw(rt, "window"))
		default:
			limits[i] = sluice.FixedWindow(capacity, rapid.SampledFrom(windows).Draw(rt, "window"))
		}
		limits[i] = limits[i].Named(fmt.Sprintf("l%d", i))
	}
	return limits
}

// drawStep mixes bursts (no time passes), small steps around boundaries,
// long idle periods, and steps backwards.
func drawStep(rt *rapid.T) time.Duration {
	var ms int64
	switch rapid.IntRange(0, 4).Draw(rt, "step kind") {
	case 0:
		ms = 0
	case 1:
		ms = rapid.Int64Range(1, 20).Draw(rt, "small step")
	case 2:
		ms = rapid.Int64Range(20, 1500).Draw(rt, "step")
	case 3:
		ms = rapid.Int64Range(1500, 120_000).Draw(rt, "long step")
	default:
		ms = -rapid.Int64Range(1, 3000).Draw(rt, "step back")
	}
	return time.Duration(ms) * time.Millisecond
}

func compare(want, got sluice.Decision) string {
	if want.Allowed != got.Allowed || want.Limit != got.Limit || want.Remaining != got.Remaining ||
		want.ResetAfter != got.ResetAfter || want.RetryAfter != got.RetryAfter || want.Binding != got.Binding {
		return fmt.Sprintf("top level: want %v, got %v", want, got)
	}
	if len(want.Limits) != len(got.Limits) {
		return fmt.Sprintf("want %d limits, got %d", len(want.Limits), len(got.Limits))
	}
	for i := range want.Limits {
		if want.Limits[i] != got.Limits[i] {
			return fmt.Sprintf("limit %d: want %+v, got %+v", i, want.Limits[i], got.Limits[i])
		}
	}
	return ""
}
