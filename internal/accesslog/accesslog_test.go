package accesslog

import (
	"testing"
	"time"
)

func TestKeepBounds(t *testing.T) {
	for range 1000 {
		if Keep(0) || Keep(-1) {
			t.Fatal("a sample of 0 or less kept a record")
		}
		if !Keep(1) || !Keep(2) {
			t.Fatal("a sample of 1 or more dropped a record")
		}
	}
}

// TestThrottle: a burst per window passes; the rest are counted and the
// first event let through afterwards says how many were held back.
func TestThrottle(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	th := &Throttle{Burst: 2, Window: time.Second, Now: func() time.Time { return now }}
	var passed []int
	for range 5 {
		if ok, suppressed := th.Allow(); ok {
			passed = append(passed, suppressed)
		}
	}
	if len(passed) != 2 || passed[0] != 0 || passed[1] != 0 {
		t.Fatalf("first window let through %v, want two events with nothing held back", passed)
	}
	now = now.Add(999 * time.Millisecond)
	if ok, _ := th.Allow(); ok {
		t.Fatal("an event passed before the window ended")
	}
	now = now.Add(time.Millisecond)
	ok, suppressed := th.Allow()
	if !ok || suppressed != 4 {
		t.Fatalf("first event of the next window: ok %v, suppressed_before %d, want true and 4", ok, suppressed)
	}
	if ok, suppressed := th.Allow(); !ok || suppressed != 0 {
		t.Fatalf("second event of the window: ok %v, suppressed_before %d, want true and 0", ok, suppressed)
	}
}
