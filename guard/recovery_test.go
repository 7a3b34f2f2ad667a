package guard_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// TestRecoveryWithinASecondOfHealing (issue 30 item 5): with the default
// options, once a store fault heals, checks are answered by the store
// again within 1 s, whatever the breaker's phase at the heal: open, half-open
// with a probe in flight, or just reopened. Each round breaks a real Redis
// (SIGSTOP, or SIGKILL and a restart), lets the breaker open, waits a random
// time, heals it, and measures, under a steady stream of checks, how long
// after the heal the first check is decided by Redis.
func TestRecoveryWithinASecondOfHealing(t *testing.T) {
	const rounds = 6
	for _, fault := range []struct {
		name         string
		break_, heal func(*testenv.RedisServer)
	}{
		{"paused", (*testenv.RedisServer).Pause, (*testenv.RedisServer).Resume},
		{"restarted", (*testenv.RedisServer).Stop, (*testenv.RedisServer).Start},
	} {
		t.Run(fault.name, func(t *testing.T) {
			srv := testenv.Redis(t)
			rs, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			g := guard.New(rs, guard.Options{})
			defer g.Close()

			type answer struct {
				done  time.Time
				store bool
			}
			var mu sync.Mutex
			var answers []answer
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					d, err := g.Check(context.Background(), request("u"), sluice.FailOpen)
					mu.Lock()
					answers = append(answers, answer{time.Now(), err == nil && !d.Degraded})
					mu.Unlock()
				}
			})
			defer func() { close(stop); wg.Wait() }()
			firstStoreAnswer := func(after time.Time) (time.Time, bool) {
				mu.Lock()
				defer mu.Unlock()
				for _, a := range answers {
					if a.store && !a.done.Before(after) {
						return a.done, true
					}
				}
				return time.Time{}, false
			}

			var worst time.Duration
			for round := range rounds {
				fault.break_(srv)
				testenv.Eventually(t, 10*time.Second, "the breaker opens", func() bool { return g.State() == "open" })
				// A random phase of the breaker's cycle (open period,
				// probe, open again) at the heal.
				time.Sleep(rand.N(700 * time.Millisecond))
				healed := time.Now()
				fault.heal(srv)
				if fault.name == "restarted" {
					healed = time.Now() // Start returns once the new Redis answers
				}
				var at time.Time
				testenv.Eventually(t, 10*time.Second, "a check decided by Redis after the heal", func() bool {
					var ok bool
					at, ok = firstStoreAnswer(healed)
					return ok
				})
				took := at.Sub(healed)
				worst = max(worst, took)
				t.Logf("round %d: decided by Redis %v after the heal", round+1, took.Round(time.Millisecond))
				if took > time.Second {
					t.Errorf("round %d: the first check decided by Redis came %v after the heal, over 1s", round+1, took.Round(time.Millisecond))
				}
			}
			t.Logf("worst recovery over %d rounds: %v", rounds, worst.Round(time.Millisecond))
		})
	}
}
