package check_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
)

// TestLeaseTokenBucketAdmitsExactly: two engines on one store lease one hot
// token bucket of 1,000 (refilling one token in ~3 hours, so none during
// the test): together they admit exactly 1,000, counted here.
func TestLeaseTokenBucketAdmitsExactly(t *testing.T) {
	for name, open := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			store := &countingLeaser{Leaser: open(t)}
			ns := fmt.Sprintf("lease-bucket-%d", time.Now().UnixNano())
			limits := auto(sluice.TokenBucket(1000, 0.0001).Named("b"))
			var admitted, checks atomic.Int64
			var wg sync.WaitGroup
			for i := range 2 {
				e := check.New(store, check.Options{LeaseHotRate: 5, LeaseTTL: 2 * time.Second, LeaseHolder: fmt.Sprintf("instance-%d", i)})
				t.Cleanup(func() { e.Close() })
				rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
				for range 16 {
					wg.Go(func() {
						for {
							checks.Add(1)
							res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "hot", Cost: 1})
							if err != nil {
								t.Error(err)
								return
							}
							if !res.Pass() {
								return
							}
							admitted.Add(1)
						}
					})
				}
			}
			wg.Wait()
			if got := admitted.Load(); got != 1000 {
				t.Fatalf("admitted %d checks of a bucket of 1000", got)
			}
			if store.leases.Load() == 0 {
				t.Fatal("no lease was taken: the test did not exercise leasing")
			}
		})
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestLeaseNeverCrossesAWindowBoundary: a lease granted in one window is
// not used in the next, which did not count its units. Window 0 sees light
// demand, so its lease (sized over a 4 s TTL, longer than the window) ends
// the window with units in hand; window 1 sees heavy demand: it admits
// exactly its own limit, not one of window 0's leftovers. Admits are
// counted by window here, on the clock the engine and store share.
func TestLeaseNeverCrossesAWindowBoundary(t *testing.T) {
	clock := &fakeClock{now: time.UnixMilli(1_000_000_000_000)} // a window boundary of 1 s
	store := memory.New(memory.Options{Clock: clock.Now})
	t.Cleanup(func() { store.Close() })
	counting := &countingLeaser{Leaser: store}
	e := check.New(counting, check.Options{Clock: clock.Now, LeaseHotRate: 5, LeaseTTL: 4 * time.Second,
		LeaseCoolAfter: time.Hour, DenyCacheSize: -1})
	t.Cleanup(func() { e.Close() })
	limits := auto(sluice.FixedWindow(100, time.Second).Named("second"))
	rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: "ns", Name: "r", Limits: limits})
	admitted := map[int64]int{}
	check1 := func() {
		now := clock.Now()
		res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "hot", Cost: 1, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if res.Pass() {
			admitted[now.UnixMilli()/1000]++
		}
	}
	// Window 0: 40 checks over its last 400 ms.
	clock.Add(600 * time.Millisecond)
	for range 40 {
		check1()
		clock.Add(10 * time.Millisecond)
	}
	if counting.leases.Load() == 0 {
		t.Fatal("window 0 took no lease: the test did not exercise leasing")
	}
	// Window 1: 300 checks in its first 300 ms.
	for range 300 {
		check1()
		clock.Add(time.Millisecond)
	}
	w0, w1 := clock.Now().UnixMilli()/1000-1, clock.Now().UnixMilli()/1000
	if admitted[w0] != 40 || admitted[w1] != 100 {
		t.Fatalf("admitted %d in window 0 and %d in window 1: want 40 and exactly the limit, 100", admitted[w0], admitted[w1])
	}
}
