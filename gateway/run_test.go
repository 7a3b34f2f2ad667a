package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
)

// TestRunReloadsOnSignalAndKeepsItsAddress: Run serves the file's routes,
// reloads it on a signal, and refuses a reload that moves the listener,
// still serving the previous configuration.
func TestRunReloadsOnSignalAndKeepsItsAddress(t *testing.T) {
	upstream := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s.URL
	}
	one, two := upstream("one"), upstream("two")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	adminAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	config := func(listen, up string) string {
		return fmt.Sprintf("listen: %q\nadmin_listen: %q\nroutes:\n  - {name: api, path_prefix: /api, upstream: %q}\n", listen, adminAddr, up)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(config(addr, one))
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	defer store.Close()
	ctx, cancel := context.WithCancel(context.Background())
	reload := make(chan os.Signal, 1)
	// Buffered: a late reload (the watcher's, a signal) never blocks Run.
	reloaded := make(chan error, 16)
	done := make(chan error, 1)
	go func() {
		done <- gateway.Run(ctx, path, cfg, gateway.RunOptions{Options: gateway.Options{Store: store, Logger: slog.New(slog.DiscardHandler)},
			ShutdownTimeout: 5 * time.Second, Reload: reload, OnReload: func(err error) { reloaded <- err }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	get := func() string {
		resp, err := http.Get("http://" + addr + "/api")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// The file watcher may report the writes below too: every reload is
	// drained until the awaited outcome.
	awaitReload := func(want func(error) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second) // generous: the reload is what is tested
		for {
			select {
			case err := <-reloaded:
				if want(err) {
					return
				}
			case <-deadline:
				t.Fatal("no reload with the awaited outcome")
			}
		}
	}
	testenv.Eventually(t, 10*time.Second, "the gateway serves", func() bool { return get() == "one" })

	write(config(addr, two))
	reload <- syscall.SIGHUP
	awaitReload(func(err error) bool { return err == nil })
	if got := get(); got != "two" {
		t.Fatalf("after a reload: %q, want two", got)
	}

	write(config(fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), one))
	reload <- syscall.SIGHUP
	awaitReload(func(err error) bool { return err != nil && strings.Contains(err.Error(), "cannot change on reload") })
	if got := get(); got != "two" {
		t.Fatalf("after a refused reload: %q, want the previous configuration (two)", got)
	}
}
