package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds and fails t (Fatalf, saying what was
// awaited) if it does not within timeout. It is for what a test can observe
// but is not told of (a change feed reaching a snapshot, a port accepting);
// give a generous timeout, since it only costs time when the test fails.
// Pauses between tries grow from 1ms to 50ms, so a quick condition is seen
// quickly and a slow one is not polled in a busy loop.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
