// Command envoyemu runs the emulated Envoy of internal/envoyemu by hand:
//
//	envoyemu -c proxy.yaml -service-cluster proxy \
//	    -addr 0.0.0.0:8888=127.0.0.1:18888 -addr ratelimit:8081=127.0.0.1:18081
//
// It serves the bootstrap's listeners until interrupted, and prints where
// each listens.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicelabs/sluice/internal/envoyemu"
)

type addrFlags map[string]string

func (a addrFlags) String() string { return fmt.Sprint(map[string]string(a)) }

func (a addrFlags) Set(v string) error {
	from, to, ok := strings.Cut(v, "=")
	if !ok || from == "" || to == "" {
		return fmt.Errorf("%q is not FROM=TO (the bootstrap's host:port, then the one to use)", v)
	}
	a[from] = to
	return nil
}

func main() {
	addrs := addrFlags{}
	config := flag.String("c", "", "the Envoy v3 bootstrap (YAML or JSON)")
	cluster := flag.String("service-cluster", "", "Envoy's --service-cluster (the source_cluster action's value; default: the bootstrap's node.cluster)")
	timeout := flag.Duration("rls-timeout", 0, "replace the rate limit filters' timeout (Envoy's default is 20ms)")
	verbose := flag.Bool("v", false, "log every request, rate limit call and charge on stream done")
	flag.Var(addrs, "addr", "FROM=TO: listen or dial TO instead of the bootstrap's FROM (repeatable)")
	flag.Parse()
	if *config == "" {
		fmt.Fprintln(os.Stderr, "envoyemu: -c names the bootstrap to run")
		os.Exit(2)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	b, err := envoyemu.LoadFile(*config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoyemu: %s: %v\n", *config, err)
		os.Exit(1)
	}
	e, err := envoyemu.Start(b, envoyemu.Options{Addrs: addrs, ServiceCluster: *cluster, RateLimitTimeout: *timeout, Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoyemu: %s: %v\n", *config, err)
		os.Exit(1)
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		sa := l.GetAddress().GetSocketAddress()
		at := fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
		fmt.Printf("listener %q (%s) at %s\n", l.GetName(), at, e.Addr(at))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	done := make(chan struct{})
	go func() { _ = e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
