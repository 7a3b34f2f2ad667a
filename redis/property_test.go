package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
)

// TestMatchesModel drives random sequences of time steps, costs and limit
// sets through the plain reference model, the memory store, Redis and Redis
// Cluster, and requires identical decisions from all four. Limits change
// mid-sequence too (capacities and refill rates, as an operator editing a
// rule would), with the semantics the model defines.
func TestMatchesModel(t *testing.T) {
	single := open(t, testenv.Redis(t).URL())
	cluster := open(t, testenv.RedisCluster(t).URL())
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	stores := []struct {
		name  string
		store sluice.Store
	}{{"memory", mem}, {"redis", single}, {"redis-cluster", cluster}}

	rapid.Check(t, func(rt *rapid.T) {
		limits := drawLimits(rt)
		model := storetest.NewModel()
		// A fresh tenant per run: every run starts from empty counters.
		tenant := fmt.Sprintf("prop-%d", time.Now().UnixNano())
		now := storetest.Base.Add(time.Duration(rapid.Int64Range(0, 100_000).Draw(rt, "start")) * time.Millisecond)
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
				Cost:    rapid.Int64Range(0, minCapacity).Draw(rt, "cost"),
				Now:     now,
			}
			want := model.Check(req)
			for _, s := range stores {
				got, err := s.store.Check(context.Background(), req)
				if err != nil {
					rt.Fatalf("%s: %v", s.name, err)
				}
				if diff := storetest.CompareDecisions(want, got); diff != "" {
					rt.Fatalf("step %d, %s at +%dms cost %d for %s: %s\nmodel: %+v\nstore: %+v",
						i, s.name, now.Sub(storetest.Base).Milliseconds(), req.Cost, req.Subject, diff, want, got)
				}
			}
		}
	})
}

var rates = []float64{0.1, 0.5, 1, 2, 3, 7, 10, 1000}

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

// drawStep mixes bursts (no time passes), small steps around boundaries, and
// long idle periods.
func drawStep(rt *rapid.T) time.Duration {
	var ms int64
	switch rapid.IntRange(0, 3).Draw(rt, "step kind") {
	case 0:
		ms = 0
	case 1:
		ms = rapid.Int64Range(1, 20).Draw(rt, "small step")
	case 2:
		ms = rapid.Int64Range(20, 1500).Draw(rt, "step")
	default:
		ms = rapid.Int64Range(1500, 120_000).Draw(rt, "long step")
	}
	return time.Duration(ms) * time.Millisecond
}
