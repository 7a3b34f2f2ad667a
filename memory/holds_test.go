package memory_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

func TestHoldsConformance(t *testing.T) {
	storetest.RunHolds(t, func(t *testing.T) sluice.Holder {
		s := memory.New(memory.Options{Clock: func() time.Time { return storetest.Base }})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestStrictConcurrency(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	storetest.StrictConcurrency(t, []sluice.Holder{s, s, s, s}, 300, 8)
}

func TestCrashedHoldersFreeAtTTL(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	storetest.CrashedHolders(t, s, 300*time.Millisecond)
}

func TestHoldsMatchModel(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	storetest.HoldsMatchModel(t, map[string]sluice.Holder{"memory": s}, 10)
}

// BenchmarkHolds: an acquire/release pair next to a plain check. A released
// hold's record takes room until it is forgotten, two lease TTLs on, so the
// budgets are made large enough for every pair the benchmark runs: the
// default ones refuse past 100,000 pairs a tenant per two minutes.
func BenchmarkHolds(b *testing.B) {
	s := memory.New(memory.Options{MaxKeys: math.MaxInt32, MaxKeysPerTenant: math.MaxInt32})
	defer s.Close()
	storetest.BenchmarkHolds(b, s)
}
