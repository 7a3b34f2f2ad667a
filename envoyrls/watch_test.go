package envoyrls_test

import (
	"context"
	"fmt"
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
