package memory_test

import (
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

// TestMatchesModel requires the decisions of the reference model from the
// memory store over random sequences, clock steps backwards and invalid
// costs included (see storetest.MatchesModel). It needs no server.
func TestMatchesModel(t *testing.T) {
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	storetest.MatchesModel(t, storetest.NamedStore{Name: "memory", Store: store})
}

// TestCreditsMatchModel holds credits and calendar windows to their
// reference model (see storetest.CreditsMatchModel).
func TestCreditsMatchModel(t *testing.T) {
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	storetest.CreditsMatchModel(t, storetest.NamedStore{Name: "memory", Store: store})
}

// TestCreditsNeverOverspend: 10,000 random-cost debits from 200 callers
// end at exactly the initial balance plus top-ups minus what was admitted.
func TestCreditsNeverOverspend(t *testing.T) {
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	storetest.CreditsNeverOverspend(t, []sluice.CreditStore{store, store}, 200, 10_000)
}
