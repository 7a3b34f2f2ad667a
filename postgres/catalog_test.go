package postgres_test

import (
	"testing"

	"github.com/sluicelabs/sluice/internal/catalogtest"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/postgres"
)

func TestCatalogContract(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalogtest.Open {
		dsn := testenv.Postgres(t)
		return func(t *testing.T) catalogtest.Catalog {
			c, err := postgres.Open(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	})
}
