package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// Environment of the writer process TestTwoProcessesWriteOneFile starts.
const (
	writerPathEnv = "SLUICE_TEST_SQLITE_WRITER_PATH"
	writerNameEnv = "SLUICE_TEST_SQLITE_WRITER_NAME"
)

// writes is how many changes each process makes.
const writes = 60

// writeMany makes writes changes as fast as it can, each a transaction that
// takes the file's write lock, plus a read after each.
func writeMany(ctx context.Context, path, name string) error {
	c, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	for i := range writes {
		tenant := name + "-" + strconv.Itoa(i)
		if _, err := c.CreateTenant(ctx, tenant); err != nil {
			return fmt.Errorf("CreateTenant %s: %w", tenant, err)
		}
		if _, err := c.Snapshot(ctx); err != nil {
			return fmt.Errorf("Snapshot: %w", err)
		}
	}
	return nil
}

// Two processes hammering one fresh file (the embedded default run twice,
// or `sluice tenant create` while `sluice serve` runs) wait for each other's
// locks: SQLITE_BUSY never reaches a caller, nothing is lost.
func TestTwoProcessesWriteOneFile(t *testing.T) {
	if path := os.Getenv(writerPathEnv); path != "" {
		// The second process.
		if err := writeMany(context.Background(), path, os.Getenv(writerNameEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	path := filepath.Join(t.TempDir(), "catalog.db")
	other := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTwoProcessesWriteOneFile$")
	other.Env = append(os.Environ(), writerPathEnv+"="+path, writerNameEnv+"=child")
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = other.CombinedOutput()
		done <- err
	}()
	if err := writeMany(t.Context(), path, "parent"); err != nil {
		t.Errorf("this process: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	c, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tenants, err := c.Tenants(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(tenants) != 2*writes {
		t.Fatalf("%d tenants; want %d", len(tenants), 2*writes)
	}
	if v, err := c.Version(t.Context()); err != nil || v != 2*writes {
		t.Fatalf("version %d, %v; want %d", v, err, 2*writes)
	}
}

// A path is a path: '%' and spaces in it are not URI escapes.
func TestOpenUsesThePathAsGiven(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a%20b.db", "100%.db", "x y.db"} {
		path := filepath.Join(dir, name)
		c, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		err = c.Migrate(t.Context())
		_ = c.Close()
		if err != nil {
			t.Fatalf("Migrate %q: %v", name, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("Open(%q) did not create that file: %v", name, err)
		}
	}
}
