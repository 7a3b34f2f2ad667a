package catalogdb_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/internal/catalogdb"
)

func TestOpenRefusesWhatItCannotOpen(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"mysql://root:hunter2@db/sluice", `database "mysql://root:xxxxx@db/sluice" is not supported`},
		{"sqlite://", "names no file"},
	} {
		_, err := catalogdb.Open(context.Background(), tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%q) = %v, want an error saying %q", tt.url, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): the error shows the password: %v", tt.url, err)
		}
	}
}

func TestOpenSQLite(t *testing.T) {
	c, err := catalogdb.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestKindAndRedactHideCredentials(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://sluice:secret@db:5432/sluice": "postgres",
		"sqlite://sluice.db":                      "sqlite://sluice.db",
		"nonsense":                                "unknown",
	} {
		if got := catalogdb.Kind(url); got != want {
			t.Errorf("Kind(%q) = %q, want %q", url, got, want)
		}
	}
	for url, want := range map[string]string{
		"postgres://sluice:secret@db/sluice": "postgres://sluice:xxxxx@db/sluice",
		"postgres://sluice@db/sluice":        "postgres://sluice@db/sluice",
		"sqlite://x.db":                      "sqlite://x.db",
	} {
		if got := catalogdb.Redact(url); got != want {
			t.Errorf("Redact(%q) = %q, want %q", url, got, want)
		}
	}
}

func TestRetryableOnlyForPostgreSQL(t *testing.T) {
	if catalogdb.Retryable("sqlite://x.db")(errors.New("x")) {
		t.Error("a SQLite error is waited through")
	}
}
