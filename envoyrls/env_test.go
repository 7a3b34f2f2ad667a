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

// TestEnvDocTableStatus: each row of docs/envoy.md's migration table says
// what the code does with its variables: "ignored" rows are ignored,
// "not implemented" rows are missing (named in the startup warning), and
// any other row names the flag its variables set.
func TestEnvDocTableStatus(t *testing.T) {
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	rowOf := map[string]EnvRow{}
	for _, row := range EnvTable {
		for _, v := range row.Vars {
			rowOf[v] = row
		}
	}
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 2 {
			continue
		}
		var vars []string
		for _, v := range strings.Split(strings.TrimPrefix(cells[0], "| "), ", ") {
			vars = append(vars, strings.Trim(v, "`"))
		}
		if _, known := rowOf[vars[0]]; !known {
			continue // another table
		}
		rows++
		what := cells[1]
		for _, v := range vars {
			row, ok := rowOf[v]
			if !ok {
				t.Errorf("docs/envoy.md's row of %s names %s, which is in no row of EnvTable", vars[0], v)
				continue
			}
			switch {
			case strings.HasPrefix(what, "ignored"):
				if row.Kind != EnvIgnored {
					t.Errorf("docs/envoy.md says %s is ignored; the code %s", v, kindWords(row))
				}
			case strings.HasPrefix(what, "not implemented"):
				if row.Kind != EnvMissing {
					t.Errorf("docs/envoy.md says %s is not implemented; the code %s", v, kindWords(row))
				}
			default:
				if row.Kind != EnvMapped || !strings.Contains(what, "`--"+row.Flag) {
					t.Errorf("docs/envoy.md's row of %s does not name --%s, the flag the code sets from it (%s)", v, row.Flag, kindWords(row))
				}
			}
		}
	}
	if rows < 20 {
		t.Fatalf("found %d rows of the migration table in docs/envoy.md; its format changed", rows)
	}
}

func kindWords(r EnvRow) string {
	switch r.Kind {
	case EnvMapped:
		return "sets --" + r.Flag
	case EnvIgnored:
		return "ignores it"
	}
	return "lists it as not implemented"
}
