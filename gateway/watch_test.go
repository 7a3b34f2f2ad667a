package gateway_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/gateway"
)

// changed reports whether ch says the file changed within d.
func changed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestWatchConfigFile(t *testing.T) {
	write := func(path, content string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as editors replace files
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("a_replaced_file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gateway.yaml")
		write(path, "a")
		ch, err := gateway.WatchConfigFile(ctx, path, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		write(path, "b")
		if !changed(ch, 10*time.Second) {
			t.Fatal("a changed file was not reported")
		}
		// Same contents, another event: not a change.
		write(path, "b")
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), "other"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if changed(ch, 500*time.Millisecond) {
			t.Fatal("events that change nothing were reported as a change")
		}
	})
	t.Run("a_configmap_symlink_swap", func(t *testing.T) {
		// Kubernetes mounts gateway.yaml -> ..data/gateway.yaml, ..data ->
		// a timestamped directory, and swaps ..data.
		dir := t.TempDir()
		for _, v := range []string{"v1", "v2"} {
			if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
				t.Fatal(err)
			}
			write(filepath.Join(dir, v, "gateway.yaml"), v)
		}
		if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "gateway.yaml")
		if err := os.Symlink(filepath.Join("..data", "gateway.yaml"), path); err != nil {
			t.Fatal(err)
		}
		ch, err := gateway.WatchConfigFile(ctx, path, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if !changed(ch, 10*time.Second) {
			t.Fatal("the symlink swap was not reported")
		}
	})
	t.Run("a_missing_directory_is_an_error", func(t *testing.T) {
		if _, err := gateway.WatchConfigFile(ctx, filepath.Join(t.TempDir(), "no", "gateway.yaml"), slog.New(slog.DiscardHandler)); err == nil {
			t.Fatal("want an error")
		}
	})
}
