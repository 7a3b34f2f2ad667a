package memory_test

import (
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

// BenchmarkHolds: an acquire/release pair next to a plain check.
func BenchmarkHolds(b *testing.B) {
	s := memory.New(memory.Options{})
	defer s.Close()
	storetest.BenchmarkHolds(b, s)
}
