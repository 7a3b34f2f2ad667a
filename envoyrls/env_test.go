package envoyrls

import (
	"os"
	"strings"
	"testing"
)

// TestEnvTable: no variable is in two rows, an ignored row says why, and
// docs/envoy.md names every variable. (cmd/sluice checks that every mapped
// row names a flag of sluice serve.)
func TestEnvTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, row := range EnvTable {
		if row.Kind == EnvMapped && row.Flag == "" {
			t.Errorf("%v are mapped to no flag", row.Vars)
		}
		if row.Kind == EnvIgnored && row.Reason == "" {
			t.Errorf("%v are ignored without a reason", row.Vars)
		}
		for _, v := range row.Vars {
			if seen[v] {
				t.Errorf("%s is in two rows", v)
			}
			seen[v] = true
			if !strings.Contains(string(doc), "`"+v+"`") {
				t.Errorf("docs/envoy.md does not say what Sluice does with %s", v)
			}
		}
	}
	// The variables read by a row without being its own.
	for _, v := range []string{"GRPC_UDS", "GRPC_SERVER_USE_TLS", "USE_PROMETHEUS"} {
		if !seen[v] {
			t.Errorf("%s is in no row", v)
		}
	}
}
