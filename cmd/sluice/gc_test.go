package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestTuneGC: the process's GC target is gcPercent when GOGC is unset, and
// GOGC's own when it is set (the runtime read it at start; tuneGC leaves it).
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "150")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the GC target became %d; want it left alone (100)", got)
	}

	os.Unsetenv("GOGC") // t.Setenv restores it afterwards
	tuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("with GOGC unset, the GC target is %d, want %d", got, gcPercent)
	}
}
