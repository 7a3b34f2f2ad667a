package loadgen_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/loadgen"
)

func TestOverloadFindsTheEdgeThenRunsAtTwiceIt(t *testing.T) {
	// A target that sheds once a step has sent more than 100 requests: with
	// steps of 100 ms, 800/s (80 requests) is the edge and 1,600/s (160) past
	// it, whatever the machine's speed. The latency threshold is out of
	// reach, so only the counts decide.
	var inStep atomic.Int64
	target := loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		if inStep.Add(1) > 100 {
			return loadgen.Shed, nil
		}
		return loadgen.Allowed, nil
	})
	opts := loadgen.OverloadOptions{
		Options: loadgen.Options{Rate: 100, Concurrency: 4, Duration: 100 * time.Millisecond},
		Factor:  2, MaxRate: 100_000, P99: time.Hour,
	}
	var seen int
	o, err := loadgen.RunOverload(context.Background(), target, opts, func(loadgen.Step) {
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
	target := loadgen.TargetFunc(func(context.Context, string) (loadgen.Outcome, error) { return loadgen.Allowed, nil })
	o, err := loadgen.RunOverload(context.Background(), target, loadgen.OverloadOptions{
		Options: loadgen.Options{Rate: 100, Concurrency: 2, Duration: 50 * time.Millisecond},
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
	target := loadgen.TargetFunc(func(context.Context, string) (loadgen.Outcome, error) { return loadgen.Shed, nil })
	o, err := loadgen.RunOverload(context.Background(), target, loadgen.OverloadOptions{
		Options: loadgen.Options{Rate: 100, Concurrency: 2, Duration: 50 * time.Millisecond},
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
	target := loadgen.TargetFunc(func(context.Context, string) (loadgen.Outcome, error) { return loadgen.Allowed, nil })
	base := loadgen.OverloadOptions{Options: loadgen.Options{Rate: 10}, Factor: 2, MaxRate: 100, P99: time.Millisecond}
	for name, change := range map[string]func(*loadgen.OverloadOptions){
		"no_rate":    func(o *loadgen.OverloadOptions) { o.Rate = 0 },
		"factor_one": func(o *loadgen.OverloadOptions) { o.Factor = 1 },
		"max_below":  func(o *loadgen.OverloadOptions) { o.MaxRate = 5 },
		"no_p99":     func(o *loadgen.OverloadOptions) { o.P99 = 0 },
	} {
		o := base
		change(&o)
		if _, err := loadgen.RunOverload(context.Background(), target, o, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
