package check_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// countingLeaser counts a leasing store's calls.
type countingLeaser struct {
	sluice.Leaser
	checks, leases, returns atomic.Int64
	// renews counts the lease calls that also gave an old lease's
	// unused units back.
	renews atomic.Int64
}

func (s *countingLeaser) Check(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s.checks.Add(1)
	return s.Leaser.Check(ctx, req)
}

func (s *countingLeaser) Lease(ctx context.Context, req sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	s.leases.Add(1)
	if req.Renew != "" {
		s.renews.Add(1)
	}
	return s.Leaser.Lease(ctx, req)
}

func (s *countingLeaser) ReturnLease(ctx context.Context, ret sluice.LeaseReturn) (sluice.LeaseReturnResult, error) {
	s.returns.Add(1)
	return s.Leaser.ReturnLease(ctx, ret)
}

// leaseStores are the real stores leasing is tested against.
func leaseStores(t *testing.T) map[string]func(t *testing.T) sluice.Leaser {
	return map[string]func(t *testing.T) sluice.Leaser{
		"memory": func(t *testing.T) sluice.Leaser { return newMemory(t) },
		"redis": func(t *testing.T) sluice.Leaser {
			store, err := sluiceredis.Open(testenv.Redis(t).URL(), sluiceredis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			return store
		},
	}
}

func auto(limits ...sluice.Limit) []sluice.Limit {
	for i := range limits {
		limits[i].Lease = sluice.LeaseAuto
	}
	return limits
}

// remaining peeks at the store's units left for subject (a check of cost
// 0 takes nothing).
func remaining(t *testing.T, store sluice.Store, ns, rule, subject string, limits []sluice.Limit) int64 {
	t.Helper()
	d, err := store.Check(context.Background(), sluice.Request{Tenant: ns, Rule: rule, Subject: subject, Limits: limits, Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestLeaseAdmitsExactlyTheLimit: two engines (two instances) on one store,
// many goroutines each hammering one hot leased key until the store denies
// them: together they admit exactly the limit, counted here, never one
// more, while most checks are decided in process.
func TestLeaseAdmitsExactlyTheLimit(t *testing.T) {
	for name, open := range leaseStores(t) {
		for _, limit := range []sluice.Limit{sluice.FixedWindow(1500, time.Hour), sluice.SlidingWindow(1500, time.Hour)} {
			t.Run(name+"/"+string(limit.Algorithm), func(t *testing.T) {
				store := &countingLeaser{Leaser: open(t)}
				ns := fmt.Sprintf("lease-exact-%d", time.Now().UnixNano())
				limits := auto(limit.Named("l"))
				var admitted, checks atomic.Int64
				var wg sync.WaitGroup
				for i := range 2 {
					reg := prometheus.NewRegistry()
					e := check.New(store, check.Options{Metrics: metrics.New(reg), LeaseHotRate: 5, LeaseTTL: 2 * time.Second,
						LeaseHolder: fmt.Sprintf("instance-%d", i)})
					t.Cleanup(func() { e.Close() })
					rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
					for range 16 {
						wg.Add(1)
						go func() {
							defer wg.Done()
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
						}()
					}
				}
				wg.Wait()
				if got := admitted.Load(); got != 1500 {
					t.Fatalf("admitted %d checks of a limit of 1500", got)
				}
				calls := store.checks.Load() + store.leases.Load()
				if calls*4 > checks.Load() {
					t.Errorf("%d store calls for %d checks: leases saved too few", calls, checks.Load())
				}
			})
		}
	}
}

// TestLeaseRenewIsOneStoreCall: a renew gives back what is left of the old
// lease and takes the next one in one store call, never a return and then
// a take. Two engines on one real store check one hot key with checks of
// cost 1 and 7 (a check of 7 that finds fewer in hand renews with units
// left) until the store denies: together they admit exactly the limit,
// renews gave units back, and no lease was returned by a call of its own.
// On Redis, INFO commandstats counts no more EVALSHA calls than store calls.
func TestLeaseRenewIsOneStoreCall(t *testing.T) {
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			var srv *testenv.RedisServer
			var base sluice.Leaser
			if name == "memory" {
				base = newMemory(t)
			} else {
				srv = testenv.Redis(t)
				rs, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rs.Close() })
				base = rs
			}
			store := &countingLeaser{Leaser: base}
			ns := fmt.Sprintf("lease-renew-%d", time.Now().UnixNano())
			limits := auto(sluice.FixedWindow(1000, time.Hour).Named("l"))
			// The script is loaded, so each store call is one EVALSHA.
			remaining(t, base, ns, "r", "s", limits)
			if srv != nil {
				if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
					t.Fatal(err)
				}
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			var engines []*check.Engine
			for i := range 2 {
				e := check.New(store, check.Options{LeaseHotRate: 5, LeaseTTL: 5 * time.Second, LeaseCoolAfter: time.Minute,
					LeaseHolder: fmt.Sprintf("instance-%d", i)})
				engines = append(engines, e)
				rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := g; ; n++ {
							cost := int64(1)
							if n%10 == 0 {
								cost = 7
							}
							res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "hot", Cost: cost})
							if err != nil {
								t.Error(err)
								return
							}
							if res.Pass() {
								admitted.Add(cost)
							} else if cost == 1 {
								return // nothing in hand, nothing in the store
							}
						}
					}()
				}
			}
			wg.Wait()
			calls, returns := store.checks.Load()+store.leases.Load(), store.returns.Load()
			if srv != nil {
				// At most: concurrent plain checks may share one
				// (redis/batch.go).
				if got := evalshaCalls(t, srv); got > calls+returns || got == 0 {
					t.Errorf("Redis ran %d script calls for %d store calls", got, calls+returns)
				}
			}
			for _, e := range engines {
				e.Close()
			}
			if got := admitted.Load(); got != 1000 {
				t.Fatalf("admitted %d units of a limit of 1000", got)
			}
			if store.renews.Load() == 0 {
				t.Fatal("no renew gave units back: the test did not test it")
			}
			if returns != 0 {
				t.Errorf("%d leases were returned by calls of their own while the key was hot (%d renews gave units back)", returns, store.renews.Load())
			}
			if left := remaining(t, base, ns, "r", "hot", limits); left != 0 {
				t.Errorf("the store has %d left once every lease ended, want 0", left)
			}
		})
	}
}

// evalshaCalls reads how many EVALSHA calls srv ran since its stats were
// reset.
func evalshaCalls(t *testing.T, srv *testenv.RedisServer) int64 {
	t.Helper()
	stats, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

// TestLeaseCoolDownReturnsUnits: a key that stops being checked gives its
// unused units back, and the store counts them as never used.
func TestLeaseCoolDownReturnsUnits(t *testing.T) {
	for name, open := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			store := &countingLeaser{Leaser: open(t)}
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			e := check.New(store, check.Options{Metrics: m, LeaseHotRate: 10, LeaseTTL: 5 * time.Second,
				LeaseCoolAfter: 50 * time.Millisecond})
			t.Cleanup(func() { e.Close() })
			ns := fmt.Sprintf("lease-cool-%d", time.Now().UnixNano())
			limits := auto(sluice.FixedWindow(1000, time.Hour).Named("l"))
			rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
			for range 30 {
				res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1})
				if err != nil || !res.Pass() {
					t.Fatal(res, err)
				}
			}
			if store.leases.Load() == 0 || e.LeasedKeys() != 1 {
				t.Fatalf("%d lease calls, %d leased keys: the key never leased", store.leases.Load(), e.LeasedKeys())
			}
			if left := remaining(t, store, ns, "r", "s", limits); left >= 970 {
				t.Fatalf("store has %d left while a lease is held: nothing was leased", left)
			}
			testenv.Eventually(t, 10*time.Second, "the cooled key's lease is returned", func() bool {
				return e.LeasedKeys() == 0 && store.returns.Load() > 0
			})
			if left := remaining(t, store, ns, "r", "s", limits); left != 970 {
				t.Fatalf("store has %d left after the lease came back, want 1000-30 = 970", left)
			}
			if got := testutil.ToFloat64(gauge(t, reg, "sluice_quota_leased_keys")); got != 0 {
				t.Errorf("sluice_quota_leased_keys = %v after cool-down", got)
			}
			// 30 checks, at least the first 9 direct (the hot rate is 10)
			// and one the lease call's: at most 20 decided in process.
			if got := savedBy(t, reg, "instance"); got < 1 || got > 20 {
				t.Errorf("instance store calls saved = %v of 30 checks, want 1 to 20", got)
			}
			if got := savedBy(t, reg, "remote"); got != 0 {
				t.Errorf("remote store calls saved = %v with no remote holder", got)
			}
		})
	}
}

// savedBy reads sluice_quota_lease_store_calls_saved_total{holder}.
func savedBy(t *testing.T, reg *prometheus.Registry, holder string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_quota_lease_store_calls_saved_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "holder" && lp.GetValue() == holder {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no sluice_quota_lease_store_calls_saved_total{holder=%q}", holder)
	return 0
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "x"}, func() float64 {
				return mf.GetMetric()[0].GetGauge().GetValue()
			})
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestLeaseDenyComesFromStore: once another holder took what is left, the
// leased key's next check asks the store and is denied with its figures.
func TestLeaseDenyComesFromStore(t *testing.T) {
	for name, open := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			store := &countingLeaser{Leaser: open(t)}
			e := check.New(store, check.Options{LeaseHotRate: 1, LeaseTTL: 5 * time.Second, MaxLeaseUnits: 3})
			t.Cleanup(func() { e.Close() })
			ns := fmt.Sprintf("lease-deny-%d", time.Now().UnixNano())
			limits := auto(sluice.FixedWindow(10, time.Hour).Named("l"))
			rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
			res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1})
			if err != nil || !res.Pass() {
				t.Fatal(res, err)
			}
			// Someone else takes the rest of the limit.
			if d, err := store.Leaser.Check(context.Background(), sluice.Request{Tenant: ns, Rule: "r", Subject: "s", Limits: limits, Cost: 7}); err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
			// The lease's 2 units in hand are admitted in process...
			for range 2 {
				res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1})
				if err != nil || !res.Pass() {
					t.Fatal(res, err)
				}
			}
			// ...then the store denies, with its retry time.
			before := store.leases.Load() + store.checks.Load()
			res, err = e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Pass() || res.Cached || res.Decision.RetryAfter <= 0 || res.Decision.Remaining != 0 {
				t.Fatalf("after the limit: %+v, want the store's deny", res)
			}
			if store.leases.Load()+store.checks.Load() == before {
				t.Fatal("the deny was decided without asking the store")
			}
		})
	}
}

// TestLeaseForgetRuleReturnsUnits: a changed or deleted rule's lease goes
// back to the store at once.
func TestLeaseForgetRuleReturnsUnits(t *testing.T) {
	store := &countingLeaser{Leaser: newMemory(t)}
	e := check.New(store, check.Options{LeaseHotRate: 1, LeaseTTL: time.Minute, LeaseCoolAfter: time.Minute})
	t.Cleanup(func() { e.Close() })
	limits := auto(sluice.FixedWindow(1000, time.Hour).Named("l"))
	rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: "t", Name: "r", Limits: limits})
	for range 5 {
		if res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1}); err != nil || !res.Pass() {
			t.Fatal(res, err)
		}
	}
	if e.LeasedKeys() != 1 || remaining(t, store, "t", "r", "s", limits) >= 995 {
		t.Fatal("the key did not lease")
	}
	e.ForgetRule("t", "r")
	if e.LeasedKeys() != 0 {
		t.Fatal("ForgetRule kept the lease")
	}
	if left := remaining(t, store, "t", "r", "s", limits); left != 995 {
		t.Fatalf("store has %d left after ForgetRule, want 995", left)
	}
}

// TestLeaseOnlyWhenEveryLimitOptsIn: a rule with one limit not opted in,
// or a rule with none, checks the store on every check, as before; so does
// a rule with plans, whose subjects' limit sets can change between checks.
func TestLeaseOnlyWhenEveryLimitOptsIn(t *testing.T) {
	store := &countingLeaser{Leaser: newMemory(t)}
	e := check.New(store, check.Options{LeaseHotRate: 1})
	t.Cleanup(func() { e.Close() })
	mixed := append(auto(sluice.FixedWindow(1000, time.Hour).Named("a")), sluice.FixedWindow(1000, time.Hour).Named("b"))
	for name, limits := range map[string][]sluice.Limit{"mixed": mixed, "none": hourly(1000), "plans": auto(sluice.FixedWindow(1000, time.Hour).Named("a"))} {
		r := check.Rule{Namespace: "t", Name: name, Limits: limits}
		if name == "plans" {
			r.Plans = sluice.Plans{"pro": auto(sluice.FixedWindow(2000, time.Hour).Named("a"))}
		}
		rule := e.NewRule(metrics.Labels{Source: "test", Rule: name}, r)
		before := store.checks.Load()
		for range 50 {
			if res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1}); err != nil || !res.Pass() {
				t.Fatal(res, err)
			}
		}
		if got := store.checks.Load() - before; got != 50 || store.leases.Load() != 0 {
			t.Fatalf("%s: %d store checks and %d leases for 50 checks, want 50 and 0", name, got, store.leases.Load())
		}
	}
	if e.LeasedKeys() != 0 {
		t.Fatal("a rule that does not lease leased")
	}
}

// failingLeaser fails every lease call as an unreachable store would.
type failingLeaser struct{ countingLeaser }

func (s *failingLeaser) Lease(context.Context, sluice.LeaseRequest) (sluice.LeaseGrant, error) {
	s.leases.Add(1)
	return sluice.LeaseGrant{}, sluice.ErrStoreUnavailable
}

// TestLeaseFallsBackToDirectChecks: a store that does not lease, or whose
// lease calls fail, has every check of a leasing rule decided directly, and
// exactly.
func TestLeaseFallsBackToDirectChecks(t *testing.T) {
	limits := auto(sluice.FixedWindow(40, time.Hour).Named("l"))
	for name, store := range map[string]sluice.Store{
		"not_a_leaser":  &gateStore{Store: newMemory(t)},
		"lease_failing": &failingLeaser{countingLeaser{Leaser: newMemory(t)}},
	} {
		t.Run(name, func(t *testing.T) {
			e := check.New(store, check.Options{LeaseHotRate: 1})
			t.Cleanup(func() { e.Close() })
			rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: "t", Name: "r", Limits: limits})
			admitted := 0
			for range 50 {
				res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				if res.Pass() {
					admitted++
				}
			}
			if admitted != 40 {
				t.Fatalf("admitted %d of a limit of 40", admitted)
			}
		})
	}
}

// TestLeaseOnlyWhileHot: a key leases only while it is hot. Checked fast
// it leases; checked slowly, below LeaseHotRate but often enough never to
// go idle for LeaseCoolAfter, its lease is returned all the same and its
// checks go back to the store, one call each.
func TestLeaseOnlyWhileHot(t *testing.T) {
	for name, open := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			store := &countingLeaser{Leaser: open(t)}
			e := check.New(store, check.Options{LeaseHotRate: 50, LeaseTTL: 10 * time.Second, LeaseCoolAfter: 500 * time.Millisecond})
			t.Cleanup(func() { e.Close() })
			ns := fmt.Sprintf("lease-hot-%d", time.Now().UnixNano())
			limits := auto(sluice.FixedWindow(100_000, time.Hour).Named("l"))
			rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
			admitted := int64(0)
			checkOnce := func() {
				t.Helper()
				res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "s", Cost: 1})
				if err != nil || !res.Pass() {
					t.Fatal(res, err)
				}
				admitted++
			}
			for range 200 {
				checkOnce()
			}
			if store.leases.Load() == 0 || e.LeasedKeys() != 1 {
				t.Fatalf("%d lease calls, %d leased keys after 200 checks: the hot key never leased", store.leases.Load(), e.LeasedKeys())
			}
			// 10 checks a second: a check every 100ms, never idle for
			// 500ms, but a fifth of the hot rate.
			deadline := time.Now().Add(5 * time.Second)
			for e.LeasedKeys() != 0 || store.returns.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("checked at 10/s (hot rate 50/s) for 5s, still %d leased keys, %d returns", e.LeasedKeys(), store.returns.Load())
				}
				time.Sleep(100 * time.Millisecond)
				checkOnce()
			}
			if left := remaining(t, store, ns, "r", "s", limits); left != 100_000-admitted {
				t.Fatalf("store has %d left after the lease came back, want %d (the unused units lost)", left, 100_000-admitted)
			}
			// Cool now: each check is one store call, and none leases.
			leases, checks := store.leases.Load(), store.checks.Load()
			for range 10 {
				time.Sleep(100 * time.Millisecond)
				checkOnce()
			}
			if got := store.checks.Load() - checks; got != 10 || store.leases.Load() != leases || e.LeasedKeys() != 0 {
				t.Fatalf("10 cool checks made %d store checks and %d lease calls (%d leased keys); want 10 and 0",
					got, store.leases.Load()-leases, e.LeasedKeys())
			}
		})
	}
}

// Set moves the clock to t.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// leaseClockStores are leaseStores on clock: the memory store reads it,
// Redis gets it in every query (clocked says which).
func leaseClockStores(clock *fakeClock) map[string]func(t *testing.T) (sluice.Leaser, bool) {
	return map[string]func(t *testing.T) (sluice.Leaser, bool){
		"memory": func(t *testing.T) (sluice.Leaser, bool) {
			return memory.New(memory.Options{Clock: clock.Now}), false
		},
		"redis": func(t *testing.T) (sluice.Leaser, bool) {
			store, err := sluiceredis.Open(testenv.Redis(t).URL(), sluiceredis.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			return store, true
		},
	}
}

// TestLeasedDecisionNamesItsWindow: a check decided in process from a lease
// of a fixed window reports the time left until the end of the window its
// units came from, counted down to the check (as a direct check's does),
// not the figure of the lease call however long ago it was; and once that
// window has ended (to the millisecond the store reads), the lease's units
// are no longer admitted: the next check asks the store, and its decision
// names the next window.
func TestLeasedDecisionNamesItsWindow(t *testing.T) {
	clock := &fakeClock{}
	for name, open := range leaseClockStores(clock) {
		t.Run(name, func(t *testing.T) {
			// A window boundary a little ahead of the real clock, so
			// Redis's keys live as long as the test.
			end := time.Now().Truncate(time.Second).Add(3 * time.Second)
			// Half a millisecond into a millisecond: the store reads the
			// one it started in.
			clock.Set(end.Add(-500*time.Millisecond + 500*time.Microsecond))
			inner, clocked := open(t)
			store := &countingLeaser{Leaser: inner}
			e := check.New(store, check.Options{Clock: clock.Now, LeaseHotRate: 50, LeaseTTL: 2 * time.Second,
				LeaseCoolAfter: time.Minute})
			t.Cleanup(func() { e.Close() })
			ns := fmt.Sprintf("lease-window-%d", time.Now().UnixNano())
			limits := auto(sluice.FixedWindow(100_000, time.Second).Named("l"))
			rule := e.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
			checkAt := func() (sluice.Decision, int64) {
				t.Helper()
				q := check.Query{Rule: rule, Subject: "hot", Cost: 1}
				if clocked {
					q.Now = clock.Now()
				}
				calls := store.checks.Load() + store.leases.Load()
				res, err := e.Check(context.Background(), q)
				if err != nil || !res.Pass() {
					t.Fatal(res, err)
				}
				return res.Decision, store.checks.Load() + store.leases.Load() - calls
			}
			for range 60 {
				checkAt()
			}
			if store.leases.Load() == 0 {
				t.Fatal("the hot key never leased")
			}
			if _, calls := checkAt(); calls != 0 {
				t.Fatalf("a check of the leased key made %d store calls", calls)
			}
			// 300ms later, still in the window: decided in process, with
			// 200ms left of the window, not the lease call's 500ms.
			clock.Set(end.Add(-200*time.Millisecond + 500*time.Microsecond))
			d, calls := checkAt()
			if calls != 0 {
				t.Fatalf("a check 300ms into a lease of 1.5s made %d store calls", calls)
			}
			if want := end.Sub(clock.Now()); d.ResetAfter != want || d.Limits[0].ResetAfter != want {
				t.Fatalf("in-process decision 200ms before its window ends says reset after %v (limit %v), want %v",
					d.ResetAfter, d.Limits[0].ResetAfter, want)
			}
			// 0.2ms past the window's end, though not yet 500ms after the
			// lease call was sent (the store read its clock's millisecond
			// rounded down): the store decides, in the next window.
			clock.Set(end.Add(200 * time.Microsecond))
			d, calls = checkAt()
			if calls == 0 {
				t.Fatalf("a unit of the window ended at %v was admitted in process at %v (reset after %v)",
					end, clock.Now(), d.ResetAfter)
			}
			if next := end.Add(time.Second).Sub(clock.Now()); d.ResetAfter < next-time.Millisecond || d.ResetAfter > next+time.Millisecond {
				t.Fatalf("the check after the window's end says reset after %v, want the next window's %v", d.ResetAfter, next)
			}
		})
	}
}

// TestLeaseUnitsReturnedEarlyReachADeniedInstance: units another instance
// gives back before the window ends (its key cooled) are granted to an
// instance that was denied meanwhile, not left unused until the window's
// retry_after because that instance cached its deny. Two engines on one
// real store: B leases all of a fixed window's units and stops; A, denied,
// gets every unit B did not use, exactly, and not one more.
func TestLeaseUnitsReturnedEarlyReachADeniedInstance(t *testing.T) {
	for name, open := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			ns := fmt.Sprintf("lease-early-%d", time.Now().UnixNano())
			limits := auto(sluice.FixedWindow(100, time.Hour).Named("l"))
			b := check.New(store, check.Options{LeaseHotRate: 20, LeaseTTL: 5 * time.Second, LeaseCoolAfter: 100 * time.Millisecond,
				LeaseHolder: "instance-b"})
			t.Cleanup(func() { b.Close() })
			a := check.New(store, check.Options{LeaseHotRate: 5, LeaseTTL: 5 * time.Second, LeaseHolder: "instance-a"})
			t.Cleanup(func() { a.Close() })
			ruleA := a.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
			ruleB := b.NewRule(metrics.Labels{Source: "test", Rule: "r"}, check.Rule{Namespace: ns, Name: "r", Limits: limits})
			allow := func(e *check.Engine, rule *check.Rule) bool {
				t.Helper()
				res, err := e.Check(context.Background(), check.Query{Rule: rule, Subject: "hot", Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				return res.Pass()
			}
			for i := range 25 {
				if !allow(b, ruleB) {
					t.Fatalf("B's check %d denied", i+1)
				}
			}
			if left := remaining(t, store, ns, "r", "hot", limits); left != 0 {
				t.Fatalf("store has %d left: B's lease (want 100) should hold the rest", left)
			}
			if allow(a, ruleA) {
				t.Fatal("A admitted a unit B holds")
			}
			// B stops: its key cools and its 75 unused units go back.
			var admitted int
			deadline := time.Now().Add(10 * time.Second)
			for admitted < 75 && time.Now().Before(deadline) {
				if allow(a, ruleA) {
					admitted++
				} else {
					time.Sleep(5 * time.Millisecond)
				}
			}
			if admitted != 75 {
				t.Fatalf("A admitted %d of the 75 units B gave back in 10 s", admitted)
			}
			if allow(a, ruleA) || allow(b, ruleB) {
				t.Fatal("a check admitted past the limit of 100")
			}
		})
	}
}
