package guard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/guard"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// freezeSelf stops this whole process (every thread) with SIGSTOP for d: what
// a GC pause, a cgroup at its CPU quota or a descheduled VM looks like from
// inside, at its worst. A child process checks that this one is stopped,
// then sends the SIGCONT. (The stop takes effect asynchronously, a few
// microseconds after kill returns, so the freeze is timed by the child.)
func freezeSelf(t *testing.T, d time.Duration) {
	t.Helper()
	pid := os.Getpid()
	waker := exec.Command("sh", "-c", fmt.Sprintf("sleep %.3f; grep -q '^State:.*T' /proc/%d/status && echo stopped; kill -CONT %d", d.Seconds(), pid, pid))
	var out strings.Builder
	waker.Stdout = &out
	if err := waker.Start(); err != nil {
		t.Fatalf("start the process that wakes this one: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP self: %v", err)
	}
	if err := waker.Wait(); err != nil {
		t.Fatalf("the waking process: %v", err)
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Fatalf("this process was not stopped %v after SIGSTOP: the test froze nothing", d)
	}
}

// TestGuardOnAFrozenProcess: checks in flight to a healthy Redis while this
// process is frozen six times the store deadline are answered by Redis when
// it wakes, late, and the breaker never opens: the deadline counts the
// process's running time, so being unable to run is not the store's fault.
// (With a wall-clock deadline every call in flight across the freeze fails
// and the breaker opens.)
func TestGuardOnAFrozenProcess(t *testing.T) {
	srv := testenv.Redis(t)
	rs, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var trips atomic.Int64
	g := guard.New(rs, guard.Options{Timeout: 50 * time.Millisecond, FailureThreshold: 3, OnStateChange: func(_, _, to string) {
		if to == "open" {
			trips.Add(1)
		}
	}})
	defer g.Close()

	type call struct {
		start, end time.Time
		err        error
		decided    bool
	}
	var mu sync.Mutex
	var calls []call
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				d, err := g.Check(context.Background(), request(fmt.Sprintf("w%d-%d", w, i)), sluice.FailClosed)
				mu.Lock()
				calls = append(calls, call{start: start, end: time.Now(), err: err, decided: err == nil && !d.Degraded})
				mu.Unlock()
			}
		}()
	}
	const freeze = 300 * time.Millisecond
	for range 2 {
		time.Sleep(200 * time.Millisecond)
		freezeSelf(t, freeze)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()

	spanned := 0
	for _, c := range calls {
		if c.err != nil || !c.decided {
			t.Errorf("a check failed (started %v before the end): %v", time.Since(c.start), c.err)
		}
		// A check that took most of a freeze was in flight across it.
		if c.end.Sub(c.start) >= freeze*8/10 {
			spanned++
		}
	}
	if spanned == 0 {
		t.Fatalf("no check was in flight across a freeze (%d checks): the test tested nothing", len(calls))
	}
	if n := trips.Load(); n != 0 || g.State() != "closed" {
		t.Fatalf("breaker opened %d times (state %s) while Redis was healthy and only this process froze", n, g.State())
	}
	if g.Stalled() < freeze {
		t.Errorf("the process clock saw %v of stall across two %v freezes", g.Stalled(), freeze)
	}
	t.Logf("%d checks, %d in flight across a freeze, stall seen %v", len(calls), spanned, g.Stalled())
}
