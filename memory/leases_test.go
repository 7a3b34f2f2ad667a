package memory_test

import (
	"math"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

func TestLeasesConformance(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T) sluice.Leaser {
		s := memory.New(memory.Options{Clock: func() time.Time { return storetest.Base }})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestLeasesMatchModel(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	storetest.LeasesMatchModel(t, map[string]sluice.Leaser{"memory": s}, 5)
}

func TestStrictLeases(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	storetest.StrictLeases(t, []sluice.Leaser{s, s}, 64, 500)
}

// BenchmarkLeases: a lease of one unit and its return next to a plain
// check. A returned lease's record takes room until it is forgotten, a TTL
// after its own, so the budgets are made large enough for every pair.
func BenchmarkLeases(b *testing.B) {
	s := memory.New(memory.Options{MaxKeys: math.MaxInt32, MaxKeysPerTenant: math.MaxInt32})
	defer s.Close()
	storetest.BenchmarkLeases(b, s)
}
