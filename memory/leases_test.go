package memory_test

import (
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
