package scriptbatch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryCallGetsItsOwnReply: under many concurrent callers, batches form
// (fewer executions than calls), every call is executed exactly once, and
// each caller gets the reply to its own call.
func TestEveryCallGetsItsOwnReply(t *testing.T) {
	var execs, executed atomic.Int64
	seen := make([]atomic.Int64, 64*50)
	b := &Batcher[int, int]{
		Exec: func(_ context.Context, calls []int) ([]int, error) {
			execs.Add(1)
			time.Sleep(time.Millisecond) // a round trip, so queues form
			out := make([]int, len(calls))
			for i, c := range calls {
				seen[c].Add(1)
				executed.Add(1)
				out[i] = -c
			}
			return out, nil
		},
		One: func(_ context.Context, c int) (int, error) {
			execs.Add(1)
			time.Sleep(time.Millisecond)
			seen[c].Add(1)
			executed.Add(1)
			return -c, nil
		},
	}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				c := g*50 + i
				r, err := b.Do(context.Background(), c)
				if err != nil || r != -c {
					t.Errorf("call %d: got %d, %v; want %d", c, r, err, -c)
					return
				}
			}
		}()
	}
	wg.Wait()
	for c := range seen {
		if n := seen[c].Load(); n != 1 {
			t.Fatalf("call %d was executed %d times, want once", c, n)
		}
	}
	if e := execs.Load(); e >= executed.Load() {
		t.Fatalf("%d executions for %d calls: no batch formed", e, executed.Load())
	}
	// A batch's goroutine frees its slot just after its callers' answers.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		inflight, queued := b.inflight, len(b.queue)
		b.mu.Unlock()
		if inflight == 0 && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the last call: %d in flight, %d queued; want none", inflight, queued)
		}
	}
}

// TestAbandonedCallIsNotSent: a queued call whose context ends before its
// batch is sent returns the context's error and is never executed.
func TestAbandonedCallIsNotSent(t *testing.T) {
	release := make(chan struct{})
	var ran sync.Map
	b := &Batcher[int, int]{
		Exec: func(_ context.Context, calls []int) ([]int, error) {
			for _, c := range calls {
				ran.Store(c, true)
			}
			return make([]int, len(calls)), nil
		},
		One: func(_ context.Context, c int) (int, error) {
			ran.Store(c, true)
			if c < InFlight {
				<-release // the first calls hold every slot
			}
			return 0, nil
		},
	}
	var wg sync.WaitGroup
	for c := range InFlight {
		wg.Add(1)
		go func() { defer wg.Done(); b.Do(context.Background(), c) }()
	}
	for {
		b.mu.Lock()
		full := b.inflight == InFlight
		b.mu.Unlock()
		if full {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 100); errc <- err }()
	for {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("the abandoned call returned %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	if _, ok := ran.Load(100); ok {
		t.Fatal("the abandoned call was executed")
	}
}
