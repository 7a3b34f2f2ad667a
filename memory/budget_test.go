package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

// testClock is a store clock tests move by hand; safe for concurrent use.
type testClock struct{ ms atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ms.Store(storetest.Base.UnixMilli())
	return c
}

func (c *testClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *testClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *testClock) opts(o memory.Options) memory.Options {
	o.Clock = c.now
	o.SweepInterval = time.Hour
	return o
}

// hourly are the limits that admit a subject once an hour, one per algorithm.
var hourly = map[string][]sluice.Limit{
	"sliding_window": {sluice.SlidingWindow(1, time.Hour).Named("h")},
	"fixed_window":   {sluice.FixedWindow(1, time.Hour).Named("h")},
	"token_bucket":   {sluice.TokenBucket(1, 1.0/3600).Named("h")},
}

func budgetError(t *testing.T, err error) *memory.BudgetError {
	t.Helper()
	var be *memory.BudgetError
	if !errors.As(err, &be) || !errors.Is(err, memory.ErrBudgetExhausted) || !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("want a BudgetError wrapping ErrBudgetExhausted and sluice.ErrStoreUnavailable, got %v", err)
	}
	return be
}

// The audit's first run: a tenant flooding new subjects must not wipe another
// tenant's exhausted counter, and its own extra subjects are refused, never
// admitted.
func TestFloodCannotResetAnotherTenantsCounter(t *testing.T) {
	for name, limits := range hourly {
		t.Run(name, func(t *testing.T) {
			clock := newTestClock()
			store := memory.New(clock.opts(memory.Options{MaxKeys: 256, MaxKeysPerTenant: 100}))
			defer store.Close()
			ctx := context.Background()
			a := sluice.Request{Tenant: "a", Rule: "r", Subject: "s", Limits: limits, Cost: 1}
			if d, err := store.Check(ctx, a); err != nil || !d.Allowed {
				t.Fatalf("a's first check: %v, %v", d, err)
			}
			if d, err := store.Check(ctx, a); err != nil || d.Allowed {
				t.Fatalf("a's second check must be denied: %v, %v", d, err)
			}

			// b floods 40 times its budget, within the hour.
			allowed, refused := 0, 0
			for i := 0; i < 4000; i++ {
				clock.advance(100 * time.Millisecond)
				b := sluice.Request{Tenant: "b", Rule: "r", Subject: strconv.Itoa(i), Limits: limits, Cost: 1}
				d, err := store.Check(ctx, b)
				switch {
				case err != nil:
					if be := budgetError(t, err); be.Tenant != "b" || be.Budget != 100 || be.Store {
						t.Fatalf("refusal of b's subject %d names the wrong budget: %+v", i, be)
					}
					if !strings.Contains(err.Error(), `tenant "b"`) || !strings.Contains(err.Error(), "100") {
						t.Fatalf("refusal does not name the tenant's budget: %v", err)
					}
					refused++
				case d.Allowed:
					allowed++
				default:
					t.Fatalf("b's new subject %d denied, want allowed or refused: %v", i, d)
				}
			}
			if allowed != 100 || refused != 3900 {
				t.Fatalf("b: %d admitted, %d refused; want exactly its budget (100) admitted and the rest refused", allowed, refused)
			}
			if d, err := store.Check(ctx, a); err != nil || d.Allowed {
				t.Fatalf("after b's flood, a's exhausted subject: %v, %v; want denied", d, err)
			}
			// b's existing counters keep working: still denied, not reset.
			if d, err := store.Check(ctx, sluice.Request{Tenant: "b", Rule: "r", Subject: "0", Limits: limits, Cost: 1}); err != nil || d.Allowed {
				t.Fatalf("b's first subject after the flood: %v, %v; want denied", d, err)
			}
			// a's budget is its own: a can still count new subjects.
			if d, err := store.Check(ctx, sluice.Request{Tenant: "a", Rule: "r", Subject: "new", Limits: limits, Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("a's new subject during b's flood: %v, %v; want allowed", d, err)
			}
			if st := store.Stats(); st.Refused != 3900 || st.Keys != 102 || st.Tenants != 2 {
				t.Fatalf("stats %+v; want 3900 refused, 102 keys, 2 tenants", st)
			}
		})
	}
}

// The store-wide cap holds too: tenants within their budgets that together
// fill the store are refused with the store's cap named, and live counters
// stay.
func TestStoreCapRefusesWithoutEvicting(t *testing.T) {
	clock := newTestClock()
	var refusedTenants sync.Map
	store := memory.New(clock.opts(memory.Options{MaxKeys: 150, MaxKeysPerTenant: 100, OnBudgetExhausted: func(tenant string) {
		n, _ := refusedTenants.LoadOrStore(tenant, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}}))
	defer store.Close()
	ctx := context.Background()
	limits := hourly["sliding_window"]
	a := sluice.Request{Tenant: "a", Rule: "r", Subject: "s", Limits: limits, Cost: 1}
	if d, err := store.Check(ctx, a); err != nil || !d.Allowed {
		t.Fatalf("a's first check: %v, %v", d, err)
	}
	for _, tenant := range []string{"b", "c"} {
		for i := 0; i < 100; i++ {
			_, err := store.Check(ctx, sluice.Request{Tenant: tenant, Rule: "r", Subject: strconv.Itoa(i), Limits: limits, Cost: 1})
			if err != nil {
				if be := budgetError(t, err); !be.Store || be.Budget != 150 || !strings.Contains(err.Error(), "MaxKeys") {
					t.Fatalf("want the store's cap named, got %+v: %v", be, err)
				}
			}
		}
	}
	if n := store.Len(); n != 150 {
		t.Fatalf("holds %d counters, want the cap, 150", n)
	}
	if d, err := store.Check(ctx, a); err != nil || d.Allowed {
		t.Fatalf("a's exhausted subject with the store full: %v, %v; want denied", d, err)
	}
	n, _ := refusedTenants.Load("c")
	if n == nil || n.(*atomic.Int64).Load() != 51 || store.Stats().Refused != 51 {
		t.Fatalf("OnBudgetExhausted saw %v refusals of c, Stats %+v; want 51", n, store.Stats())
	}
}

// The audit's second run: one tenant flooding a 1-per-hour limit past its
// budget, from many goroutines; no subject may ever be admitted twice.
func TestFloodNeverAdmitsASubjectTwice(t *testing.T) {
	for name, limits := range hourly {
		t.Run(name, func(t *testing.T) {
			clock := newTestClock()
			store := memory.New(clock.opts(memory.Options{MaxKeys: 1000, MaxKeysPerTenant: 100}))
			defer store.Close()
			const subjects, rounds, workers = 1000, 5, 8
			var admitted [subjects]atomic.Int64
			var refused atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for r := 0; r < rounds; r++ {
						for _, i := range rng.Perm(subjects) {
							req := sluice.Request{Tenant: "t", Rule: "r", Subject: strconv.Itoa(i), Limits: limits, Cost: 1}
							d, err := store.Check(context.Background(), req)
							if err != nil {
								if !errors.Is(err, memory.ErrBudgetExhausted) {
									t.Error(err)
									return
								}
								refused.Add(1)
								continue
							}
							if d.Allowed {
								admitted[i].Add(1)
							}
						}
						clock.advance(time.Minute) // a few minutes in all: within the hour
						store.Sweep()
					}
				}()
			}
			wg.Wait()
			total := int64(0)
			for i := range admitted {
				if n := admitted[i].Load(); n > 1 {
					t.Fatalf("subject %d admitted %d times within the hour", i, n)
				}
				total += admitted[i].Load()
			}
			if total != 100 || refused.Load() == 0 {
				t.Fatalf("%d subjects admitted, %d checks refused; want exactly the budget (100) admitted", total, refused.Load())
			}
		})
	}
}

// State back to full is dropped to make room, so a tenant whose subjects come
// and go keeps working at its budget.
func TestCountersBackToFullMakeRoom(t *testing.T) {
	clock := newTestClock()
	store := memory.New(clock.opts(memory.Options{MaxKeys: 64, MaxKeysPerTenant: 8}))
	defer store.Close()
	ctx := context.Background()
	bucket := []sluice.Limit{sluice.TokenBucket(2, 1).Named("b")} // one token back per second
	check := func(subject string) error {
		d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: bucket, Cost: 1})
		if err == nil && !d.Allowed {
			t.Fatalf("subject %s denied: %v", subject, d)
		}
		return err
	}
	for i := 0; i < 8; i++ {
		if err := check("old-" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := check("new"); err == nil {
		t.Fatal("a 9th counter fit a budget of 8")
	} else {
		budgetError(t, err)
	}
	clock.advance(999 * time.Millisecond)
	if err := check("new"); err == nil {
		t.Fatal("a counter 1ms short of full was dropped to make room")
	}
	clock.advance(time.Millisecond)
	if err := check("new"); err != nil {
		t.Fatalf("buckets back to full did not make room: %v", err)
	}
	// Turnover: 8 new subjects a second, for a minute, never refused.
	for round := 0; round < 60; round++ {
		clock.advance(time.Second)
		for i := 0; i < 8; i++ {
			if err := check(fmt.Sprintf("r%d-%d", round, i)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	// The last round's 8 are live; every older one made room for them.
	if n := store.Len(); n != 8 {
		t.Fatalf("holds %d counters, want the last round's 8 (the budget)", n)
	}
}

// A full store makes room from any tenant's state back to full.
func TestStoreCapReclaimsStateBackToFull(t *testing.T) {
	clock := newTestClock()
	store := memory.New(clock.opts(memory.Options{MaxKeys: 8, MaxKeysPerTenant: 8}))
	defer store.Close()
	ctx := context.Background()
	window := []sluice.Limit{sluice.FixedWindow(1, time.Second).Named("w")}
	for i := 0; i < 8; i++ {
		if _, err := store.Check(ctx, sluice.Request{Tenant: "x", Rule: "r", Subject: strconv.Itoa(i), Limits: window, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	y := sluice.Request{Tenant: "y", Rule: "r", Subject: "s", Limits: window, Cost: 1}
	if _, err := store.Check(ctx, y); err == nil || !budgetError(t, err).Store {
		t.Fatalf("want the store's cap, got %v", err)
	}
	clock.advance(time.Second) // the next window: x's counts no longer matter
	if d, err := store.Check(ctx, y); err != nil || !d.Allowed {
		t.Fatalf("y after x's windows ended: %v, %v", d, err)
	}
}

// A refused check writes nothing: the limits whose counters exist are not
// consumed.
func TestRefusalConsumesNothing(t *testing.T) {
	clock := newTestClock()
	store := memory.New(clock.opts(memory.Options{MaxKeys: 2, MaxKeysPerTenant: 2}))
	defer store.Close()
	ctx := context.Background()
	a := sluice.SlidingWindow(2, time.Hour).Named("a")
	b := sluice.SlidingWindow(2, time.Hour).Named("b")
	for _, subject := range []string{"s", "other"} {
		if _, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: subject, Limits: []sluice.Limit{a}, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "s", Limits: []sluice.Limit{a, b}, Cost: 1})
	budgetError(t, err)
	d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "s", Limits: []sluice.Limit{a}, Cost: 1})
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after a refusal, s's limit a: %v, %v; want its last unit allowed", d, err)
	}
	// Peeks and denies create nothing, so they are answered at the budget.
	if d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "new", Limits: []sluice.Limit{a}}); err != nil || !d.Allowed {
		t.Fatalf("peek at a new subject at the budget: %v, %v", d, err)
	}
	// Reset gives the room back.
	if err := store.Reset(ctx, "t", "r", "other", []sluice.Limit{a}); err != nil {
		t.Fatal(err)
	}
	if d, err := store.Check(ctx, sluice.Request{Tenant: "t", Rule: "r", Subject: "new", Limits: []sluice.Limit{a}, Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("after a reset freed room: %v, %v", d, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts memory.Options
		want string // "" = valid
	}{
		{memory.Options{}, ""},
		{memory.Options{MaxKeys: 5}, ""},
		{memory.Options{MaxKeys: 10, MaxKeysPerTenant: 10}, ""},
		{memory.Options{MaxKeysPerTenant: memory.DefaultMaxKeys}, ""},
		{memory.Options{MaxKeys: -1}, "MaxKeys must be positive"},
		{memory.Options{MaxKeysPerTenant: -1}, "MaxKeysPerTenant must be positive"},
		{memory.Options{MaxKeys: 10, MaxKeysPerTenant: 11}, "MaxKeysPerTenant 11 exceeds MaxKeys 10"},
		{memory.Options{MaxKeysPerTenant: memory.DefaultMaxKeys + 1}, "exceeds MaxKeys 1000000"},
	} {
		err := tc.opts.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.opts, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an ErrInvalid saying %q", tc.opts, err, tc.want)
			continue
		}
		func() {
			defer func() {
				if r := recover(); r != err.Error() && fmt.Sprint(r) != err.Error() {
					t.Errorf("%+v: New panicked with %v, want %v", tc.opts, r, err)
				}
			}()
			memory.New(tc.opts).Close()
		}()
	}
}
