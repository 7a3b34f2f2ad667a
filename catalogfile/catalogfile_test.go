package catalogfile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice"
)

const file = `tenants:
  - name: acme
    keys:
      - {name: web, role: check}
    rules:
      - name: api
        route: /api/*
        limits:
          - {name: minute, algorithm: fixed_window, limit: 10, window: 1m}
`

// TestPlan: changes come tenants first, then rules and keys, deletions
// last; a catalog that matches the file plans nothing.
func TestPlan(t *testing.T) {
	desired, err := Parse("catalog.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	current := []Current{{Tenant: sluice.Tenant{Name: "old", Status: sluice.TenantActive}}}
	steps, err := Plan(desired, current, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, strings.SplitN(s.What, ":", 2)[0])
	}
	want := []string{"+ tenant acme", "+ rule acme/api", "+ key acme/web (role check)", "- tenant old (with its 0 keys and 0 rules)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("plan\n%q\nwant\n%q", got, want)
	}

	same := []Current{{Tenant: sluice.Tenant{Name: "acme", Status: sluice.TenantActive},
		Keys: []sluice.APIKey{{Name: "web", Role: sluice.Role("check")}}, Rules: desired[0].Rules}}
	if steps, err := Plan(desired, same, true); err != nil || len(steps) != 0 {
		t.Fatalf("a matching catalog plans %d steps (%v), want none", len(steps), err)
	}
}

// TestParseNamesTheField: an error names the file, the entry and the field.
func TestParseNamesTheField(t *testing.T) {
	_, err := Parse("catalog.yaml", []byte(strings.Replace(file, "role: check", "role: root", 1)))
	if err == nil || !strings.Contains(err.Error(), "catalog.yaml: tenants[0] (acme).keys[0] (web).role") {
		t.Fatalf("error %v, want one naming catalog.yaml: tenants[0] (acme).keys[0] (web).role", err)
	}
}

// TestCreatedKeySecretIsFlushed: the secret of a key apply creates is out
// of a buffered writer as soon as the key exists, before the next step,
// so a kill later in the apply does not lose it.
func TestCreatedKeySecretIsFlushed(t *testing.T) {
	desired, err := Parse("catalog.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := Plan(desired, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var sink bytes.Buffer
	out := bufio.NewWriterSize(&sink, 4096)
	for _, s := range steps {
		if strings.HasPrefix(s.What, "+ key ") {
			if err := s.Do(context.Background(), keyMaker{}, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(sink.String(), "its secret, shown only this once: sk_test") {
		t.Errorf("after the key was created, the writer's destination holds %q", sink.String())
	}
}

// keyMaker creates keys; nothing else of Admin is called.
type keyMaker struct{ Admin }

func (keyMaker) NewKey(_ context.Context, tenant, name string, role sluice.Role) (sluice.APIKey, string, error) {
	return sluice.APIKey{ID: "key_1", Tenant: tenant, Name: name, Role: role}, "sk_test", nil
}

// TestParseRefusesAnEmptyFile: no document is an error, not "no tenants",
// and --prune of a file listing no tenant is refused.
func TestParseRefusesAnEmptyFile(t *testing.T) {
	for _, body := range []string{"", "\n", "# nothing here\n"} {
		if _, err := Parse("catalog.yaml", []byte(body)); err == nil || !strings.Contains(err.Error(), "catalog.yaml: the file is empty") {
			t.Errorf("Parse(%q): %v", body, err)
		}
	}
	desired, err := Parse("catalog.yaml", []byte("tenants: []"))
	if err != nil {
		t.Fatal(err)
	}
	current := []Current{{Tenant: sluice.Tenant{Name: "acme", Status: sluice.TenantActive}}}
	if _, err := Plan(desired, current, true); !errors.Is(err, ErrPruneWithoutTenants) {
		t.Errorf("Plan with prune of no tenant: %v", err)
	}
}
