package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/bench"
)

func TestOverloadFindsTheEdgeThenRunsAtTwiceIt(t *testing.T) {
	// One sender and 2 ms a request: at most about 500/s, so the steps from
	// 50/s up must go past the edge well before the maximum rate.
	target := bench.TargetFunc(func(ctx context.Context, subject string) (bench.Outcome, error) {
		time.Sleep(2 * time.Millisecond)
		return bench.Allowed, nil
	})
	opts := bench.OverloadOptions{
		Options: bench.Options{Rate: 50, Concurrency: 1, Duration: 200 * time.Millisecond},
		Factor:  2, MaxRate: 100_000, P99: 100 * time.Millisecond,
	}
	var seen int
	o, err := bench.RunOverload(context.Background(), target, opts, func(bench.Step) { seen++ })
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(o.Steps) || len(o.Steps) < 3 || o.Bounded || o.Edge <= 0 {
		t.Fatalf("edge %v, bounded %v, %d steps (%d reported)", o.Edge, o.Bounded, len(o.Steps), seen)
	}
	last, past := o.Steps[len(o.Steps)-1], o.Steps[len(o.Steps)-2]
	if !last.Beyond || last.Rate != 2*o.Edge || past.Healthy || past.Rate != 2*o.Edge {
		t.Fatalf("want a step past the edge at %v then one at twice the edge: %+v, %+v", o.Edge, past, last)
	}
	for i, s := range o.Steps[:len(o.Steps)-2] {
		if !s.Healthy || s.Rate != 50*float64(int(1)<<i) {
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
