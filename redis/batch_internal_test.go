package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestBatchMatchesModel: a batch of plain checks decides each as the
// reference model decides the same checks one after another at the batch's
// instant, including several checks of one subject in one batch (each sees
// the ones before it) and all-or-nothing denies across two limits.
func TestBatchMatchesModel(t *testing.T) {
	opt, err := ParseURL(testenv.Redis(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var runs atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		limits := storetest.DrawSmallLimits(rt)
		minCapacity := limits[0].Capacity
		for _, l := range limits {
			minCapacity = min(minCapacity, l.Capacity)
		}
		model := storetest.NewModel()
		tenant := fmt.Sprintf("batch-%d", runs.Add(1))
		now := storetest.Base
		for range rapid.IntRange(1, 12).Draw(rt, "batches") {
			now = now.Add(time.Duration(rapid.IntRange(0, 2500).Draw(rt, "step ms")) * time.Millisecond)
			n := rapid.IntRange(1, 8).Draw(rt, "checks")
			reqs := make([]sluice.Request, n)
			calls := make([]scriptCall, n)
			for i := range reqs {
				reqs[i] = sluice.Request{Tenant: tenant, Rule: "r", Limits: limits, Now: now,
					Subject: rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "subject"),
					Cost:    rapid.Int64Range(0, minCapacity).Draw(rt, "cost")}
				calls[i] = buildCall("sluice:", reqs[i])
			}
			replies, err := execBatch(context.Background(), client, calls, strconv.FormatInt(now.UnixMilli(), 10))
			if err != nil {
				rt.Fatal(err)
			}
			for i, req := range reqs {
				want := model.Check(req)
				got, err := limitDecisions(replies[i][2:], req.Limits)
				if err != nil {
					rt.Fatal(err)
				}
				d := sluice.Decision{Limits: got}
				d.Combine()
				if d.Allowed != want.Allowed || d.Remaining != want.Remaining || d.ResetAfter != want.ResetAfter || d.RetryAfter != want.RetryAfter {
					rt.Fatalf("check %d of %d (%s, cost %d): want %+v, got %+v", i+1, n, req.Subject, req.Cost, want, d)
				}
				for j := range want.Limits {
					if want.Limits[j] != got[j] {
						rt.Fatalf("check %d of %d, limit %d: want %+v, got %+v", i+1, n, j, want.Limits[j], got[j])
					}
				}
			}
		}
	})
}

// TestConcurrentChecksAreBatched: many concurrent plain checks share
// script calls (fewer calls than checks reach Redis) and still admit
// exactly the limit.
func TestConcurrentChecksAreBatched(t *testing.T) {
	srv := testenv.Redis(t)
	s, err := Open(srv.URL(), Options{Prefix: fmt.Sprintf("batched-%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.client.Do(ctx, s.client.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	const callers, each, capacity = 64, 40, 1000
	limit := []sluice.Limit{sluice.FixedWindow(capacity, time.Hour).Named("hour")}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				// Half the checks on one hot subject, the rest spread.
				subject := "hot"
				if i%2 == 1 {
					subject = fmt.Sprintf("u%d-%d", c, i)
				}
				d, err := s.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: limit, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed && subject == "hot" {
					admitted.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got != capacity {
		t.Fatalf("the hot subject was admitted %d times; want exactly its limit, %d", got, capacity)
	}
	info, err := s.client.Do(ctx, s.client.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(info, "evalsha") + commandCalls(info, "eval")
	t.Logf("%d checks in %d script calls", callers*each, calls)
	if calls == 0 || calls >= callers*each {
		t.Fatalf("%d checks took %d script calls; want fewer calls than checks, from batches", callers*each, calls)
	}
}

// commandCalls reads cmdstat_NAME:calls=N from INFO commandstats.
func commandCalls(info, name string) int {
	var calls int
	prefix := "cmdstat_" + name + ":calls="
	for i := 0; i+len(prefix) <= len(info); i++ {
		if info[i:i+len(prefix)] == prefix && (i == 0 || info[i-1] == '\n') {
			fmt.Sscanf(info[i+len(prefix):], "%d", &calls)
		}
	}
	return calls
}
