package memory_test

import (
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s := memory.New(memory.Options{Clock: func() time.Time { return storetest.Base }})
		t.Cleanup(func() { s.Close() })
		return s
	})
}
