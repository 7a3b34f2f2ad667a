package catalogtest

import (
	"testing"

	"github.com/sluicelabs/sluice"
)

// testGenerations: a tenant deleted and created again at once, within the
// same millisecond as like as not, gets a generation, and with it a counter
// namespace, that no tenant had before; reads return what the create did.
func testGenerations(t *testing.T, c Catalog, open Open) {
	ctx := t.Context()
	seen := map[string]bool{}
	var last int64
	for range 5 {
		created := must(c.CreateTenant(ctx, "acme"))(t)
		if created.Generation <= last {
			t.Fatalf("generation %d after %d", created.Generation, last)
		}
		last = created.Generation
		ns := created.CounterNamespace()
		if seen[ns] {
			t.Fatalf("counter namespace %q came back", ns)
		}
		seen[ns] = true
		for _, inst := range []sluice.Catalog{c, open(t)} {
			if got := must(inst.Tenant(ctx, "acme"))(t); got.Generation != created.Generation {
				t.Fatalf("Tenant read generation %d; CreateTenant returned %d", got.Generation, created.Generation)
			}
			if got := must(inst.Snapshot(ctx))(t).Tenants["acme"]; got.CounterNamespace() != ns {
				t.Fatalf("the snapshot's namespace %q; CreateTenant's %q", got.CounterNamespace(), ns)
			}
		}
		if err := c.DeleteTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
	}
}
