package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// countingStore counts the calls that reach the real store underneath.
type countingStore struct {
	sluice.Store
	calls atomic.Int64
}

func (s *countingStore) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s.calls.Add(1)
	return s.Store.Check(ctx, req)
}

// TestGuardOnRedisOutages runs the guard against a real redis-server that is
// paused (hung: accepts connections, answers nothing) or stopped (refuses
// connections), then brought back.
func TestGuardOnRedisOutages(t *testing.T) {
	outages := []struct {
		name    string
		begin   func(*testenv.RedisServer)
		recover func(*testenv.RedisServer)
	}{
		{"paused_then_resumed", (*testenv.RedisServer).Pause, (*testenv.RedisServer).Resume},
		{"stopped_then_started", (*testenv.RedisServer).Stop, (*testenv.RedisServer).Start},
	}
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			srv := testenv.Redis(t)
			rs, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			store := &countingStore{Store: rs}
			const timeout = 100 * time.Millisecond
			g := guard.New(store, guard.Options{Timeout: timeout, FailureThreshold: 3, OpenTimeout: 200 * time.Millisecond})
			defer g.Close()
			ctx := context.Background()

			if d, err := g.Check(ctx, request("u"), sluice.FailClosed); err != nil || !d.Allowed || d.Degraded {
				t.Fatalf("healthy redis: %v degraded=%v err=%v", d, d.Degraded, err)
			}

			o.begin(srv)
			for i := range 3 {
				start := time.Now()
				_, err := g.Check(ctx, request("u"), sluice.FailClosed)
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Fatalf("check %d during outage: err = %v, want ErrStoreUnavailable", i, err)
				}
				// Not a performance bound: a call that waited for Redis's
				// own timeouts (seconds) instead of the deadline fails this.
				if waited := time.Since(start); waited > timeout+2*time.Second {
					t.Fatalf("check %d waited %v, far past the %v deadline", i, waited, timeout)
				}
			}
			if s := g.State(); s != "open" {
				t.Fatalf("breaker %s after 3 failures, want open", s)
			}
			calls := store.calls.Load()
			for range 50 {
				d, err := g.Check(ctx, request("u"), sluice.FailOpen)
				if err != nil || !d.Allowed || !d.Degraded {
					t.Fatalf("open breaker, fail open: %v degraded=%v err=%v", d, d.Degraded, err)
				}
				if _, err := g.Check(ctx, request("u"), sluice.FailClosed); !errors.Is(err, guard.ErrBreakerOpen) {
					t.Fatalf("open breaker, fail closed: err = %v, want ErrBreakerOpen", err)
				}
			}
			if n := store.calls.Load() - calls; n != 0 {
				t.Fatalf("%d store calls while the breaker was open, want 0", n)
			}

			o.recover(srv)
			// Probes keep failing until the client reconnects; poll until one
			// gets through and closes the breaker.
			testenv.Eventually(t, 10*time.Second, "a probe gets through after recovery", func() bool {
				d, err := g.Check(ctx, request("v"), sluice.FailClosed)
				if err == nil && (!d.Allowed || d.Degraded) {
					t.Fatalf("after recovery: %v degraded=%v, want a real allow", d, d.Degraded)
				}
				return err == nil
			})
			if s := g.State(); s != "closed" {
				t.Fatalf("breaker %s after a successful probe, want closed", s)
			}
		})
	}
}

// TestDeadClusterMasterFailsOnlyItsKeys kills one master of a three-master
// Redis Cluster: the checks whose keys lived there fail by their policy, and
// every other check goes on being decided by Redis, even after the dead
// master's breakers have opened (one breaker per slot range, not one for the
// whole cluster).
func TestDeadClusterMasterFailsOnlyItsKeys(t *testing.T) {
	cluster := testenv.RedisCluster(t)
	rs, err := sluiceredis.Open(cluster.URL(), sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var opened atomic.Int64
	g := guard.New(rs, guard.Options{Timeout: 500 * time.Millisecond, FailureThreshold: 2, OpenTimeout: time.Hour,
		OnStateChange: func(_, _, to string) {
			if to == "open" {
				opened.Add(1)
			}
		}})
	defer g.Close()
	ctx := context.Background()
	subjects := make([]string, 120)
	for i := range subjects {
		subjects[i] = fmt.Sprint("user-", i)
		if _, err := g.Check(ctx, request(subjects[i]), sluice.FailClosed); err != nil {
			t.Fatalf("healthy cluster, %s: %v", subjects[i], err)
		}
	}
	// Which node holds each subject's keys: the node whose keys carry its tag.
	dead := cluster.Nodes[1]
	keys, err := dead.Do("KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	onDead := map[string]bool{}
	for _, s := range subjects {
		if strings.Contains(keys, sluice.SubjectTag("", "api", s)) {
			onDead[s] = true
		}
	}
	if len(onDead) == 0 || len(onDead) == len(subjects) {
		t.Fatalf("%d of %d subjects on the node to kill: the test needs some on it and some elsewhere", len(onDead), len(subjects))
	}
	dead.Stop()

	for round := range 3 { // past the breaker threshold for every range
		for _, s := range subjects {
			d, err := g.Check(ctx, request(s), sluice.FailClosed)
			switch {
			case onDead[s] && !errors.Is(err, sluice.ErrStoreUnavailable):
				t.Fatalf("round %d, %s on the dead master: %v, %v; want ErrStoreUnavailable", round, s, d, err)
			case !onDead[s] && (err != nil || d.Degraded):
				t.Fatalf("round %d, %s on a live master: %v, %v; want Redis's own decision", round, s, d, err)
			}
		}
	}
	if opened.Load() == 0 {
		t.Fatal("no breaker opened for the dead master's keys")
	}
	if st := g.State(); st != guard.StatePartial {
		t.Fatalf("breaker state %q, want %q", st, guard.StatePartial)
	}
}
