package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// ackTimeout is the WAIT bound of these tests: far above a replica's
// acknowledgement on a loaded machine, so only a replica that cannot
// answer fails a check.
const ackTimeout = 5 * time.Second

func openAcked(t *testing.T, url string, acks int, timeout time.Duration) *sluiceredis.Store {
	t.Helper()
	s, err := sluiceredis.Open(url, sluiceredis.Options{ReplicaAcks: acks, ReplicaAckTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformanceWithReplicaAcks(t *testing.T) {
	primary := testenv.Redis(t)
	testenv.RedisReplica(t, primary)
	storetest.Run(t, func(t *testing.T) sluice.Store { return openAcked(t, primary.URL(), 1, ackTimeout) })
}

func TestHoldsConformanceWithReplicaAcks(t *testing.T) {
	primary := testenv.Redis(t)
	testenv.RedisReplica(t, primary)
	storetest.RunHolds(t, func(t *testing.T) sluice.Holder { return openAcked(t, primary.URL(), 1, ackTimeout) })
}

func TestConformanceClusterWithReplicaAcks(t *testing.T) {
	cluster := testenv.RedisClusterWith(t, testenv.ClusterOptions{Replicas: 1})
	storetest.Run(t, func(t *testing.T) sluice.Store { return openAcked(t, cluster.URL(), 1, ackTimeout) })
}

func TestSentinelWithReplicaAcks(t *testing.T) {
	primary := testenv.Redis(t)
	replica := testenv.RedisReplica(t, primary)
	sentinel := testenv.RedisSentinel(t, primary, "mymaster")
	store := openAcked(t, "redis-sentinel://mymaster@"+sentinel.Addr+"/0", 1, ackTimeout)
	assertAcked(t, store, replica)
}

// assertAcked: with one replica that acknowledges, writes are allowed; with
// it stopped, a write is a store failure naming the missing replicas, while
// a deny and a peek, which write nothing, are answered.
func assertAcked(t *testing.T, store *sluiceredis.Store, replica *testenv.RedisServer) {
	t.Helper()
	ctx := context.Background()
	limit := []sluice.Limit{sluice.FixedWindow(2, time.Hour).Named("hourly")}
	req := func(subject string, cost int64) sluice.Request {
		return sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: limit, Cost: cost}
	}
	for i := range 2 {
		d, err := store.Check(ctx, req("spent", 1))
		if err != nil || !d.Allowed {
			t.Fatalf("check %d with the replica up: %+v, %v", i+1, d, err)
		}
	}
	replica.Pause()
	defer replica.Resume()
	if d, err := store.Check(ctx, req("spent", 1)); err != nil || d.Allowed {
		t.Errorf("a deny with the replica stopped: want it answered, got %+v, %v", d, err)
	}
	if d, err := store.Check(ctx, req("fresh", 0)); err != nil || !d.Allowed || d.Remaining != 2 {
		t.Errorf("a peek with the replica stopped: want it answered, got %+v, %v", d, err)
	}
	_, err := store.Check(ctx, req("fresh", 1))
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, sluiceredis.ErrTooFewReplicas) {
		t.Fatalf("a write with the replica stopped: want ErrStoreUnavailable and ErrTooFewReplicas, got %v", err)
	}
	t.Logf("unacknowledged write: %v", err)
}

func TestReplicaAcksFailWritesNoReplicaHas(t *testing.T) {
	primary := testenv.Redis(t)
	replica := testenv.RedisReplica(t, primary)
	// A short bound: each unacknowledged write waits it out.
	assertAcked(t, openAcked(t, primary.URL(), 1, 200*time.Millisecond), replica)

	t.Run("more acks than replicas", func(t *testing.T) {
		store := openAcked(t, primary.URL(), 2, 100*time.Millisecond)
		req := sluice.Request{Tenant: "t", Rule: "r", Subject: "two", Cost: 1,
			Limits: []sluice.Limit{sluice.TokenBucket(5, 1).Named("b")}}
		if _, err := store.Check(context.Background(), req); !errors.Is(err, sluiceredis.ErrTooFewReplicas) {
			t.Errorf("2 acks asked of one replica: want ErrTooFewReplicas, got %v", err)
		}
	})
	t.Run("hold operations", func(t *testing.T) {
		store := openAcked(t, primary.URL(), 1, ackTimeout)
		req := sluice.Request{Tenant: "t", Rule: "r", Subject: "holder", Cost: 1,
			Limits: []sluice.Limit{sluice.Concurrency(2, time.Minute).Named("inflight")}}
		d, err := store.Check(context.Background(), req)
		if err != nil || d.Hold == nil {
			t.Fatalf("taking a lease: %+v, %v", d, err)
		}
		res, err := store.Hold(context.Background(), sluice.HoldOp{ID: d.Hold.ID, Tenant: "t", Action: sluice.HoldRelease})
		if err != nil || res.Status != sluice.HoldReleased {
			t.Fatalf("releasing it: %+v, %v", res, err)
		}
		// Released twice: nothing changes, nothing to acknowledge.
		replica.Pause()
		defer replica.Resume()
		res, err = store.Hold(context.Background(), sluice.HoldOp{ID: d.Hold.ID, Tenant: "t", Action: sluice.HoldRelease})
		if err != nil || res.Status != sluice.HoldFinished {
			t.Errorf("a finished hold with the replica stopped: want it answered, got %+v, %v", res, err)
		}
	})
}

// BenchmarkReplicaAcks measures --redis-replica-acks on a primary with one
// replica, N=0 against N=1 in the same run, for checks that write (allow)
// and checks that do not (deny, which N=1 still pipelines with a WAIT that
// returns at once): time per check, CPU per check of this process
// (client-cpu-ns/op), of the primary (redis-cpu-ns/op) and of the replica
// (replica-cpu-ns/op), and the checks' p50 and p99 latency.
func BenchmarkReplicaAcks(b *testing.B) {
	primary := testenv.Redis(b)
	replica := testenv.RedisReplica(b, primary)
	sentinel := testenv.RedisSentinel(b, primary, "mymaster")
	// The same primary, reached directly and through Sentinel (which adds
	// nothing per check once the client has the master's address).
	deployments := []struct{ name, url string }{
		{"primary", primary.URL()},
		{"sentinel", "redis-sentinel://mymaster@" + sentinel.Addr + "/0"},
	}
	ctx := context.Background()
	workloads := []struct {
		name string
		req  sluice.Request
	}{
		{"allow", sluice.Request{Rule: "bench", Subject: "allowed", Cost: 1,
			Limits: []sluice.Limit{sluice.FixedWindow(1<<40, time.Hour).Named("hourly")}}},
		{"deny", sluice.Request{Rule: "bench", Subject: "denied", Cost: 1,
			Limits: []sluice.Limit{sluice.FixedWindow(1, time.Hour).Named("hourly")}}},
	}
	// The machine's load drifts: each run (-count) swaps which N goes first.
	order := []int{0, 1}
	if replicaAckRuns%2 == 1 {
		order = []int{1, 0}
	}
	replicaAckRuns++
	for _, dep := range deployments {
		for _, w := range workloads {
			for _, acks := range order {
				store, err := sluiceredis.Open(dep.url, sluiceredis.Options{ReplicaAcks: acks})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := store.Check(ctx, w.req); err != nil { // the deny's subject is spent
					b.Fatal(err)
				}
				check := func(b *testing.B, lat *[]time.Duration) bool {
					start := time.Now()
					_, err := store.Check(ctx, w.req)
					*lat = append(*lat, time.Since(start))
					if err != nil {
						b.Error(err)
						return false
					}
					return true
				}
				for _, par := range []int{1, 32} {
					name := fmt.Sprintf("%s/%s/acks=%d/serial", dep.name, w.name, acks)
					if par > 1 {
						name = fmt.Sprintf("%s/%s/acks=%d/parallel%d", dep.name, w.name, acks, par*2)
					}
					b.Run(name, func(b *testing.B) {
						var mu sync.Mutex
						var all []time.Duration
						done := measureCPU(b, primary)
						replica0 := redisCPU(b, replica)
						if par == 1 {
							for b.Loop() && check(b, &all) {
							}
						} else {
							b.SetParallelism(par)
							b.RunParallel(func(pb *testing.PB) {
								var lat []time.Duration
								for pb.Next() && check(b, &lat) {
								}
								mu.Lock()
								all = append(all, lat...)
								mu.Unlock()
							})
						}
						done()
						b.ReportMetric(float64((redisCPU(b, replica)-replica0).Nanoseconds())/float64(b.N), "replica-cpu-ns/op")
						slices.Sort(all)
						if len(all) > 0 {
							b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
							b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
						}
					})
				}
				store.Close()
			}
		}
	}
}

var replicaAckRuns int

// TestReplicaAcksUnderConcurrency: concurrent writing checks are committed
// in batches with one WAIT each (groupcommit.go). With the replica up,
// exactly the limit is admitted and every admission is on the replica;
// with it stopped, every concurrent write fails and none is allowed, while
// the denies among them are still answered.
//
// Without the WAIT in the batch, the stopped replica's run allows 75: the
// test fails.
func TestReplicaAcksUnderConcurrency(t *testing.T) {
	primary := testenv.Redis(t)
	replica := testenv.RedisReplica(t, primary)
	store := openAcked(t, primary.URL(), 1, time.Second)
	ctx := context.Background()
	const limit, callers = 150, 400
	limits := []sluice.Limit{sluice.FixedWindow(limit, time.Hour).Named("hourly")}
	run := func(subject string) (allowed, denied int, errs []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: limits, Cost: 1})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case d.Allowed:
					allowed++
				default:
					denied++
				}
			})
		}
		wg.Wait()
		return allowed, denied, errs
	}
	allowed, denied, errs := run("up")
	if len(errs) > 0 || allowed != limit || denied != callers-limit {
		t.Fatalf("replica up: %d allowed, %d denied, errors %v; want %d and %d, none", allowed, denied, errs, limit, callers-limit)
	}
	// Every admitted count is on the replica once the WAITs answered.
	replicaStore, err := sluiceredis.Open(replica.URL(), sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer replicaStore.Close()
	d, err := replicaStore.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "up", Limits: limits, Cost: 0})
	if err != nil || d.Remaining != 0 {
		t.Fatalf("the replica's count: %+v, %v; want none remaining", d, err)
	}

	// Half the quota spent with the replica up; the rest would be written
	// with it stopped, and must all fail.
	for range limit / 2 {
		if d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "down", Limits: limits, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("spending half: %+v, %v", d, err)
		}
	}
	replica.Pause()
	defer replica.Resume()
	// The calls that wrote (the primary counted them: their units stay
	// spent) fail; once those have taken the rest, the others are denies.
	allowed, denied, errs = run("down")
	if allowed != 0 || len(errs) != limit-limit/2 || denied != callers-len(errs) {
		t.Fatalf("replica stopped: %d allowed, %d denied, %d errors; want none allowed, %d failed and the rest denied",
			allowed, denied, len(errs), limit-limit/2)
	}
	for _, err := range errs {
		if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, sluiceredis.ErrTooFewReplicas) {
			t.Fatalf("an unacknowledged write: want ErrStoreUnavailable and ErrTooFewReplicas, got %v", err)
		}
	}
}
