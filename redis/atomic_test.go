package redis_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

const (
	concurrentRequests = 500
	burstCapacity      = 50
	instances          = 4
)

// burst sends concurrentRequests checks at once, spread round-robin over the
// given instances, and returns how many were allowed.
func burst(t *testing.T, instances []func(ctx context.Context) (bool, error)) int {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, concurrentRequests)
	for i := 0; i < concurrentRequests; i++ {
		check := instances[i%len(instances)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := check(context.Background())
			if err != nil {
				errs <- err
				return
			}
			if ok {
				allowed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(allowed.Load())
}

// TestConcurrentChecksAdmitExactlyTheCapacity: 500 simultaneous requests from 4
// independent instances (each its own Limiter and Redis connection) against a
// bucket of 50 that refills negligibly: exactly 50 pass, not 51.
func TestConcurrentChecksAdmitExactlyTheCapacity(t *testing.T) {
	srv := testenv.Redis(t)
	// One token every 10^6 s: nothing refills during the test.
	limits := []sluice.Limit{
		sluice.TokenBucket(burstCapacity, 1e-6).Named("burst"),
		sluice.SlidingWindow(burstCapacity, 24*time.Hour).Named("day"),
	}
	for _, limit := range limits {
		t.Run(string(limit.Algorithm), func(t *testing.T) {
			var checks []func(context.Context) (bool, error)
			for i := 0; i < instances; i++ {
				lim, err := sluice.NewLimiter(open(t, srv.URL()), "atomic-"+t.Name(), limit)
				if err != nil {
					t.Fatal(err)
				}
				checks = append(checks, func(ctx context.Context) (bool, error) {
					d, err := lim.Allow(ctx, "hot-key")
					return d.Allowed, err
				})
			}
			if got := burst(t, checks); got != burstCapacity {
				t.Fatalf("admitted %d of %d concurrent requests, want exactly %d", got, concurrentRequests, burstCapacity)
			}
		})
	}
}

// naiveLimiter is the bug Sluice exists to fix, kept here to prove that the
// test above can fail: it reads the count, decides in the client, then writes,
// in two round trips, so concurrent instances all read the same count.
type naiveLimiter struct {
	client rueidis.Client
	key    string
	limit  int64
}

func (n *naiveLimiter) allow(ctx context.Context) (bool, error) {
	used, err := n.client.Do(ctx, n.client.B().Get().Key(n.key).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false, err
	}
	if used >= n.limit {
		return false, nil
	}
	err = n.client.Do(ctx, n.client.B().Set().Key(n.key).Value(strconv.FormatInt(used+1, 10)).Build()).Error()
	return err == nil, err
}

func TestNaiveReadThenWriteOverAdmits(t *testing.T) {
	srv := testenv.Redis(t)
	var checks []func(context.Context) (bool, error)
	for i := 0; i < instances; i++ {
		opt, err := sluiceredis.ParseURL(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		client, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		naive := &naiveLimiter{client: client, key: "naive", limit: burstCapacity}
		checks = append(checks, naive.allow)
	}
	got := burst(t, checks)
	if got <= burstCapacity {
		t.Fatalf("the naive read-then-write limiter admitted %d, no more than %d: the concurrency test could not catch the race it exists for", got, burstCapacity)
	}
	t.Logf("naive read-then-write admitted %d of %d with a limit of %d", got, concurrentRequests, burstCapacity)
}
