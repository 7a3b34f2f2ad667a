package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/loadgen"
	"github.com/sluicelabs/sluice/memory"
)

// servicedStore is a store with a fixed capacity: workers calls at a time,
// each taking serviceTime, like a Redis that answers in turn. Its capacity
// is workers/serviceTime checks per second.
type servicedStore struct {
	sluice.Store
	slots       chan struct{}
	serviceTime time.Duration
}

func (s *servicedStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return sluice.Decision{}, ctx.Err()
	}
	defer func() { <-s.slots }()
	time.Sleep(s.serviceTime)
	return s.Store.Check(ctx, req)
}

// TestOverloadIsShedNotFailed offers twice the service's capacity in an open
// model (arrivals at a fixed rate whatever the service does). Past its bound
// on checks in flight the service sheds (503 "overloaded", counted apart),
// and every other check is served within its deadline: no failed answer, no
// breaker trip, although the rule fails closed.
func TestOverloadIsShedNotFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("an overload run takes two seconds")
	}
	ctx := context.Background()
	catalog, secret := catalogtest.SQLiteTenant(t, sluice.Rule{Tenant: "acme", Name: "api", Route: "/api*", FailureMode: sluice.FailClosed,
		Limits: []sluice.Limit{sluice.TokenBucket(1e9, 1e9).Named("burst")}})
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	// 4 workers of 80ms: 50 checks per second. Slow on purpose: the load
	// generator and the server share this process, and must not be what
	// saturates.
	store := &servicedStore{Store: mem, slots: make(chan struct{}, 4), serviceTime: 80 * time.Millisecond}
	var trips atomic.Int64
	engine := check.New(store, check.Options{
		// 8 in flight wait at most 160ms for a slot: well inside the
		// deadline, so nothing admitted waits long enough to fail.
		MaxInFlight: 8,
		// Without the bound, the queue would grow by 50 checks a second
		// and its waits pass this deadline within two seconds.
		Guard: guard.Options{Timeout: time.Second, OnStateChange: func(_, _, to string) {
			if to == "open" {
				trips.Add(1)
			}
		}},
	})
	t.Cleanup(func() { engine.Close() })
	api, err := New(ctx, Options{Catalog: catalog, Engine: engine, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	bindOpenAPI(t, api)
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)

	res, err := loadgen.Run(ctx, loadgen.NewHTTPCheck(srv.URL, secret, "/api/x", 1, 256), loadgen.Options{
		Rate: 100, Concurrency: 256, Duration: 2 * time.Second, Subjects: 1000, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d: allowed %d, denied %d, shed %d, failed %d (first: %v), dropped %d; p99 %v",
		res.Sent, res.Allowed, res.Denied, res.Shed, res.Errors, res.FirstError, res.Dropped, res.Percentile(0.99))
	if res.Errors != 0 {
		t.Errorf("%d failed answers under overload (first: %v); want only served and shed ones", res.Errors, res.FirstError)
	}
	if trips.Load() != 0 {
		t.Errorf("the breaker opened %d times: overload of this process was taken for a dead store", trips.Load())
	}
	if res.Shed == 0 {
		t.Errorf("nothing was shed at twice the capacity: the bound on checks in flight did not act")
	}
	// The shed checks made room rather than the service grinding to a
	// halt (a loose floor: timers under the race detector on a shared
	// machine are far from the nominal rate).
	if served := res.Allowed + res.Denied; served < 20 {
		t.Errorf("only %d checks served in 2s by a store that serves up to 50 per second", served)
	}
}
