package envoyrls_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/internal/testenv"
)

func liveConfig(perUnit int) string {
	return fmt.Sprintf("domain: live\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", perUnit)
}

// limitOf is the requests_per_unit the server currently applies to user.
func limitOf(srv *envoyrls.Server) uint32 {
	m, ok := srv.Config().Domain("live").Match(desc("user", "x").Entries)
	if !ok {
		return 0
	}
	return m.Rule.RequestsPerUnit
}

func watch(t *testing.T, srv *envoyrls.Server, dir string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Watch(ctx, dir, 5*time.Millisecond)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func TestReloadWhileTrafficRuns(t *testing.T) {
	dir := configDir(t)
	write(t, dir, "live.yaml", liveConfig(1000))
	srv, _ := memoryServer(t, dir, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&testenv.Buffer{}, nil))})
	c := serve(t, srv)
	watch(t, srv, dir)

	stop := make(chan struct{})
	var calls, failures atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{
					Domain:      "live",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", fmt.Sprint(w, "-", i%50))},
				})
				calls.Add(1)
				if err != nil {
					failures.Add(1)
				}
			}
		}()
	}
	for i := 1; i <= 10; i++ {
		want := 1000 + i
		write(t, dir, "live.yaml", liveConfig(want))
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("limit %d to take effect", want), func() bool { return limitOf(srv) == uint32(want) })
	}
	// A new domain in a new file appears too.
	write(t, dir, "extra.yaml", "domain: extra\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	testenv.Eventually(t, 10*time.Second, "the extra domain", func() bool { return srv.Config().Domain("extra") != nil })
	close(stop)
	wg.Wait()
	if failures.Load() != 0 || calls.Load() == 0 {
		t.Fatalf("%d of %d RPCs failed during reloads", failures.Load(), calls.Load())
	}
	resp := call(t, c, "live", desc("user", "new"))
	if got := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 1010 {
		t.Fatalf("served limit after reloads = %d, want 1010", got)
	}
}

func TestBrokenConfigKeepsLastGood(t *testing.T) {
	dir := configDir(t)
	write(t, dir, "live.yaml", liveConfig(2))
	logs := &testenv.Buffer{}
	srv, _ := memoryServer(t, dir, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	c := serve(t, srv)
	watch(t, srv, dir)

	broken := []struct {
		name, file, content, wantLog string
	}{
		{"malformed_yaml", "live.yaml", "domain: live\ndescriptors: [", "live.yaml"},
		{"invalid_rule", "live.yaml", "domain: live\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n", "fortnight"},
		{"duplicate_domain", "copy.yaml", liveConfig(9), "already defined"},
	}
	for _, b := range broken {
		t.Run(b.name, func(t *testing.T) {
			write(t, dir, "live.yaml", liveConfig(2))
			write(t, dir, b.file, b.content)
			testenv.Eventually(t, 10*time.Second, "the error to be logged", func() bool { return strings.Contains(logs.String(), b.wantLog) })
			if got := limitOf(srv); got != 2 {
				t.Fatalf("limit after a broken reload = %d, want the last good 2", got)
			}
			if r := call(t, c, "live", desc("user", b.name)); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
				t.Fatalf("served %v", r.Statuses[0].CurrentLimit)
			}
			if b.file != "live.yaml" {
				if err := os.Remove(filepath.Join(dir, b.file)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if !strings.Contains(logs.String(), "keeping the last good one") {
		t.Errorf("logs do not say the last good configuration stays: %s", logs.String())
	}
	write(t, dir, "live.yaml", liveConfig(7))
	testenv.Eventually(t, 10*time.Second, "the fixed file to load", func() bool { return limitOf(srv) == 7 })
}

// TestWatchSeesConfigMapAndSymlinkSwapsWithoutPolling: with the poll an
// hour apart, only inotify can tell of a change. Kubernetes updates a
// mounted ConfigMap by writing a new ..<timestamp> directory, pointing
// ..data_tmp at it and renaming ..data_tmp over ..data (the files are
// links through ..data); envoyproxy/ratelimit's own layout swaps the
// RUNTIME_ROOT symlink itself. Both are seen, several times over, as are
// a new subdirectory's files.
func TestWatchSeesConfigMapAndSymlinkSwapsWithoutPolling(t *testing.T) {
	t.Run("configmap", func(t *testing.T) {
		mount := t.TempDir()
		version := 0
		swap := func(perUnit int) {
			t.Helper()
			version++
			name := fmt.Sprintf("..2026_12_02_%02d", version)
			if err := os.Mkdir(filepath.Join(mount, name), 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(mount, name), "live.yaml", liveConfig(perUnit))
			tmp := filepath.Join(mount, "..data_tmp")
			if err := os.Symlink(name, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(mount, "..data")); err != nil {
				t.Fatal(err)
			}
			if version > 1 {
				// The kubelet then removes the old version.
				if err := os.RemoveAll(filepath.Join(mount, fmt.Sprintf("..2026_12_02_%02d", version-1))); err != nil {
					t.Fatal(err)
				}
			}
		}
		swap(1)
		if err := os.Symlink("..data/live.yaml", filepath.Join(mount, "live.yaml")); err != nil {
			t.Fatal(err)
		}
		srv, _ := memoryServer(t, mount, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&testenv.Buffer{}, nil))})
		watchEvery(t, srv, mount, time.Hour)
		for perUnit := 2; perUnit <= 4; perUnit++ {
			swap(perUnit)
			testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the ConfigMap's limit %d, seen by inotify", perUnit), func() bool { return limitOf(srv) == uint32(perUnit) })
		}
	})
	t.Run("runtime_root_symlink", func(t *testing.T) {
		root := t.TempDir()
		current := filepath.Join(root, "current")
		for v := 1; v <= 3; v++ {
			dir := filepath.Join(root, fmt.Sprintf("v%d", v), "config")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, dir, "live.yaml", liveConfig(10+v))
		}
		if err := os.Symlink("v1", current); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(current, "config")
		srv, _ := memoryServer(t, dir, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&testenv.Buffer{}, nil))})
		watchEvery(t, srv, dir, time.Hour)
		for v := 2; v <= 3; v++ {
			tmp := filepath.Join(root, "current_tmp")
			if err := os.Symlink(fmt.Sprintf("v%d", v), tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, current); err != nil {
				t.Fatal(err)
			}
			want := uint32(10 + v)
			testenv.Eventually(t, 10*time.Second, fmt.Sprintf("RUNTIME_ROOT swapped to v%d, seen by inotify", v), func() bool { return limitOf(srv) == want })
		}
		// A file in a new subdirectory counts too.
		sub := filepath.Join(root, "v3", "config", "more")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the new subdirectory watched", func() bool {
			write(t, sub, "extra.yaml", "domain: extra\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
			return srv.Config().Domain("extra") != nil
		})
	})
}

func watchEvery(t *testing.T, srv *envoyrls.Server, dir string, interval time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Watch(ctx, dir, interval)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// BenchmarkConfigMapSwapSeen measures, per op, a ConfigMap ..data swap until
// its limit is in force: inotify's path (the poll is an hour apart). See
// BENCHMARKS.md, "Envoy configuration reload".
func BenchmarkConfigMapSwapSeen(b *testing.B) {
	mount := b.TempDir()
	version := 0
	swap := func(perUnit int) {
		version++
		name := fmt.Sprintf("..v%06d", version)
		must := func(err error) {
			if err != nil {
				b.Fatal(err)
			}
		}
		must(os.Mkdir(filepath.Join(mount, name), 0o755))
		must(os.WriteFile(filepath.Join(mount, name, "live.yaml"), []byte(liveConfig(perUnit)), 0o644))
		tmp := filepath.Join(mount, "..data_tmp")
		must(os.Symlink(name, tmp))
		must(os.Rename(tmp, filepath.Join(mount, "..data")))
		if version > 1 {
			must(os.RemoveAll(filepath.Join(mount, fmt.Sprintf("..v%06d", version-1))))
		}
	}
	swap(1)
	if err := os.Symlink("..data/live.yaml", filepath.Join(mount, "live.yaml")); err != nil {
		b.Fatal(err)
	}
	srv, _ := memoryServer(b, mount, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Watch(ctx, mount, time.Hour) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond) // the watch's first look
	b.ResetTimer()
	for i := range b.N {
		want := uint32(2 + i)
		swap(int(want))
		for limitOf(srv) != want {
			time.Sleep(100 * time.Microsecond)
		}
	}
}
