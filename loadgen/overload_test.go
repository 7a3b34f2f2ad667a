package bench_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bench"
)

func TestOverloadFindsTheEdgeThenRunsAtTwiceIt(t *testing.T) {
	// A target that sheds once a step has sent more than 100 requests: with
	// steps of 100 ms, 800/s (80 requests) is the edge and 1,600/s (160) past
	// it, whatever the machine's speed. The latency threshold is out of
	// reach, so only the counts decide.
	var inStep atomic.Int64
	target := bench.TargetFunc(func(ctx context.Context, subject string) (bench.Outcome, error) {
		if inStep.Add(1) > 100 {
			return bench.Shed, nil
		}
		return bench.Allowed, nil
	})
	opts := bench.OverloadOptions{
		Options: bench.Options{Rate: 100, Concurrency: 4, Duration: 100 * time.Millisecond},
		Factor:  2, MaxRate: 100_000, P99: time.Hour,
	}
	var seen int
	o, err := bench.RunOverload(context.Background(), target, opts, func(bench.Step) {
		seen++
		inStep.Store(0)
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(o.Steps) || len(o.Steps) != 6 || o.Bounded || o.Edge != 800 {
		t.Fatalf("edge %v, bounded %v, %d steps (%d reported), want 800 and 6 steps", o.Edge, o.Bounded, len(o.Steps), seen)
	}
	last, past := o.Steps[5], o.Steps[4]
	if !last.Beyond || last.Rate != 1600 || past.Healthy || past.Beyond || past.Rate != 1600 || past.Result.Shed == 0 {
		t.Fatalf("want a step past the edge at 1600/s then one at twice the edge: %+v, %+v", past, last)
	}
	for i, s := range o.Steps[:4] {
		if !s.Healthy || s.Rate != 100*float64(int(1)<<i) || s.Result.Shed != 0 {
			t.Fatalf("step %d: %+v", i, s)
		}
	}
}

func TestOverloadStopsAtTheMaximumRate(t *testing.T) {
	target := bench.TargetFunc(func(context.Context, string) (bench.Outcome, error) { return bench.Allowed, nil })
	o, err := bench.RunOverload(context.Background(), target, bench.OverloadOptions{
		Options: bench.Options{Rate: 100, Concurrency: 2, Duration: 50 * time.Millisecond},
		Factor:  2, MaxRate: 300, P99: time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 100 and 200; 400 would pass 300. The edge is then a lower bound, and
	// there is no step at twice it.
	if len(o.Steps) != 2 || !o.Bounded || o.Edge != 200 || o.Steps[1].Beyond {
		t.Fatalf("%+v", o)
	}
}

func TestOverloadWithShedFirstStepHasNoEdge(t *testing.T) {
	target := bench.TargetFunc(func(context.Context, string) (bench.Outcome, error) { return bench.Shed, nil })
	o, err := bench.RunOverload(context.Background(), target, bench.OverloadOptions{
		Options: bench.Options{Rate: 100, Concurrency: 2, Duration: 50 * time.Millisecond},
		Factor:  2, MaxRate: 1000, P99: time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Steps) != 1 || o.Edge != 0 || o.Steps[0].Healthy {
		t.Fatalf("shedding is past the edge: %+v", o)
	}
}

func TestOverloadRejectsBadOptions(t *testing.T) {
	target := bench.TargetFunc(func(context.Context, string) (bench.Outcome, error) { return bench.Allowed, nil })
	base := bench.OverloadOptions{Options: bench.Options{Rate: 10}, Factor: 2, MaxRate: 100, P99: time.Millisecond}
	for name, change := range map[string]func(*bench.OverloadOptions){
		"no_rate":    func(o *bench.OverloadOptions) { o.Rate = 0 },
		"factor_one": func(o *bench.OverloadOptions) { o.Factor = 1 },
		"max_below":  func(o *bench.OverloadOptions) { o.MaxRate = 5 },
		"no_p99":     func(o *bench.OverloadOptions) { o.P99 = 0 },
	} {
		o := base
		change(&o)
		if _, err := bench.RunOverload(context.Background(), target, o, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
