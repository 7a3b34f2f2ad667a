package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
)

func TestLimiter(t *testing.T) {
	// A still clock: the exact retry_after below must not depend on a
	// millisecond ticking between two calls.
	now := time.Unix(1_700_000_000, 0)
	store := memory.New(memory.Options{Clock: func() time.Time { return now }})
	defer store.Close()
	ctx := context.Background()
	lim, err := sluice.NewLimiter(store, "api", sluice.TokenBucket(3, 1).Named("burst"), sluice.PerHour(100).Named("hourly"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.AllowN(ctx, "alice", 3)
	if err != nil || !d.Allowed || d.Remaining != 0 || d.Limit != 3 {
		t.Fatalf("AllowN 3: %v %v", d, err)
	}
	d, _ = lim.Allow(ctx, "alice")
	if d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("4th: %v, want denied for 1s", d)
	}
	if d, _ := lim.Allow(ctx, "bob"); !d.Allowed {
		t.Fatalf("bob shares alice's bucket: %v", d)
	}
	if d, _ := lim.Peek(ctx, "alice"); !d.Allowed || d.Remaining != 0 || d.Limits[1].Remaining != 97 {
		t.Fatalf("peek: %+v", d)
	}
	if err := lim.Reset(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "alice"); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after reset: %v", d)
	}
	if _, err := lim.AllowN(ctx, "alice", 4); !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("cost above capacity: %v", err)
	}

	other, _ := sluice.NewLimiter(store, "other", sluice.TokenBucket(3, 1).Named("burst"))
	if d, _ := other.AllowN(ctx, "alice", 3); !d.Allowed {
		t.Fatalf("limiters with different names share counters: %v", d)
	}
}

func TestNewLimiterValidates(t *testing.T) {
	store := memory.New(memory.Options{})
	defer store.Close()
	for name, build := range map[string]func() (*sluice.Limiter, error){
		"no_store":  func() (*sluice.Limiter, error) { return sluice.NewLimiter(nil, "x", sluice.PerSecond(1)) },
		"no_name":   func() (*sluice.Limiter, error) { return sluice.NewLimiter(store, "", sluice.PerSecond(1)) },
		"bad_limit": func() (*sluice.Limiter, error) { return sluice.NewLimiter(store, "x", sluice.PerSecond(0)) },
		"same_name_2": func() (*sluice.Limiter, error) {
			return sluice.NewLimiter(store, "x", sluice.PerSecond(1), sluice.PerSecond(2))
		},
	} {
		if _, err := build(); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// TestLimitsPerCall: a limiter made without limits takes them per call
// (AllowWith), keeping each limit's counters while its name, algorithm and
// window stay the same, so a subject moved to a bigger plan keeps what it
// used; its own-limit calls say how to use it; bad per-call limits are
// ErrInvalid and take nothing.
func TestLimitsPerCall(t *testing.T) {
	ctx := context.Background()
	store := memory.New(memory.Options{})
	defer store.Close()
	plans, err := sluice.NewLimiter(store, "plans")
	if err != nil {
		t.Fatal(err)
	}
	free := sluice.PerHour(2).Named("hourly")
	pro := sluice.PerHour(5).Named("hourly")
	for i, want := range []bool{true, true, false} {
		d, err := plans.AllowWith(ctx, "u", 1, free)
		if err != nil || d.Allowed != want {
			t.Fatalf("free check %d: %+v, %v; want allowed %v", i+1, d, err, want)
		}
	}
	// Upgraded: the same counter, judged against 5.
	d, err := plans.AllowWith(ctx, "u", 1, pro)
	if err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("pro check: %+v, %v; want allowed with 2 remaining", d, err)
	}
	if d, err := plans.AllowWith(ctx, "other", 1, free); err != nil || d.Remaining != 1 {
		t.Fatalf("another subject: %+v, %v", d, err)
	}
	for name, call := range map[string]func() error{
		"allow": func() error { _, err := plans.Allow(ctx, "u"); return err },
		"peek":  func() error { _, err := plans.Peek(ctx, "u"); return err },
		"wait":  func() error { _, err := plans.Wait(ctx, "u"); return err },
		"reset": func() error { return plans.Reset(ctx, "u") },
	} {
		if err := call(); !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), "AllowWith") {
			t.Errorf("%s on a limiter without limits: %v, want ErrInvalid naming AllowWith", name, err)
		}
	}
	for name, limits := range map[string][]sluice.Limit{"none": nil, "bad": {sluice.PerSecond(0)}, "same_name": {free, pro}} {
		if _, err := plans.AllowWith(ctx, "u", 1, limits...); !errors.Is(err, sluice.ErrInvalid) {
			t.Errorf("AllowWith %s: %v, want ErrInvalid", name, err)
		}
	}
	if err := plans.ResetWith(ctx, "u", pro); err != nil {
		t.Fatal(err)
	}
	if d, err := plans.AllowWith(ctx, "u", 0, pro); err != nil || d.Remaining != 5 {
		t.Fatalf("after ResetWith: %+v, %v; want 5 remaining", d, err)
	}
}

// TestLimiterWait: Wait blocks until the request is allowed, sleeping the
// exact retry_after between asks; it gives up, taking nothing, when the
// context ends or its deadline comes before the limit would allow; a cost
// that can never fit is an error at once.
func TestLimiterWait(t *testing.T) {
	ctx := context.Background()
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })

	t.Run("blocks_until_allowed", func(t *testing.T) {
		l, err := sluice.NewLimiter(store, "wait-bucket", sluice.TokenBucket(1, 20).Named("b"))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := l.Allow(ctx, "u"); err != nil || !d.Allowed {
			t.Fatalf("first: %+v %v", d, err)
		}
		start := time.Now()
		d, err := l.Wait(ctx, "u")
		if err != nil || !d.Allowed {
			t.Fatalf("Wait: %+v %v", d, err)
		}
		// A lower bound only: a token comes back every 50ms.
		if took := time.Since(start); took < 40*time.Millisecond {
			t.Fatalf("Wait returned after %v, before the bucket could refill", took)
		}
	})

	// A bucket refilled once an hour, not an hourly window: a window's end
	// may come within the test's minute.
	hourly, err := sluice.NewLimiter(store, "wait-hourly", sluice.TokenBucket(1, 1.0/3600).Named("h"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := hourly.Allow(ctx, "u"); err != nil || !d.Allowed {
		t.Fatalf("first: %+v %v", d, err)
	}
	t.Run("deadline_before_the_limit_allows", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		d, err := hourly.Wait(short, "u")
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.RetryAfter <= time.Minute {
			t.Fatalf("Wait with a minute left on an hourly limit: %+v %v, want at once the deny and DeadlineExceeded", d, err)
		}
	})
	t.Run("canceled_while_waiting", func(t *testing.T) {
		c, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		if _, err := hourly.Wait(c, "u"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait canceled: %v", err)
		}
		if d, _ := hourly.Peek(ctx, "u"); d.Remaining != 0 {
			t.Fatalf("after the canceled waits: %+v", d)
		}
	})
	t.Run("a_cost_that_never_fits", func(t *testing.T) {
		if _, err := hourly.WaitN(ctx, "v", 2); !errors.Is(err, sluice.ErrInvalid) {
			t.Fatalf("WaitN(2) on a bucket of 1: %v, want ErrInvalid at once", err)
		}
	})
}
