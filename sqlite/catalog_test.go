package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/sqlite"
)

func TestCatalogContract(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalogtest.Open {
		path := filepath.Join(t.TempDir(), "catalog.db")
		return func(t *testing.T) catalogtest.Catalog {
			c, err := sqlite.Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	})
}
