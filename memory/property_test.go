package memory_test

import (
	"testing"

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
