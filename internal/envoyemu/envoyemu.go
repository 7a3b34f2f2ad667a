// Package envoyemu is an emulated Envoy for tests: it reads an Envoy v3
// bootstrap with go-control-plane's types and serves its HTTP listeners
// with the part of Envoy a rate limit service sees. A request is routed by
// the HTTP connection manager's static route configuration (virtual host by
// Host, route by prefix, path, regex and headers); the HTTP filters run in
// their order: the rate limit filter computes descriptors from the
// route's, the virtual host's, the per-route or the filter's rate_limits
// actions as Envoy does, asks the rate limit cluster's ShouldRateLimit and
// answers 429 on OVER_LIMIT; header_mutation and header_to_metadata change
// the request and the stream's dynamic metadata; the router answers a
// direct_response or proxies to the route's cluster (with subset load
// balancing on envoy.lb metadata). When the response has been sent, the
// descriptors of apply_on_stream_done policies are charged, fire and
// forget, as Envoy does when the stream is destroyed.
//
// What it does not emulate is refused when the bootstrap is loaded, with
// the name of the field, rather than ignored: an answer from the emulator
// is an answer Envoy would give.
package envoyemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	// The typed configurations a bootstrap names, so its Anys resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Options say where the emulator listens and dials instead of the
// bootstrap's addresses, and what Envoy's command line would say.
type Options struct {
	// Addrs maps an address of the bootstrap ("0.0.0.0:8888" of a
	// listener, "ratelimit:8081" of an endpoint) to the one used instead
	// ("127.0.0.1:0" for a free port). A listener's address not in the
	// map is listened on as written. An endpoint whose address is one of
	// this emulator's listeners reaches that listener where it really
	// listens.
	Addrs map[string]string
	// ServiceCluster is Envoy's --service-cluster, the source_cluster
	// action's value; by default the bootstrap's node.cluster.
	ServiceCluster string
	// RateLimitTimeout, when not zero, replaces every rate limit filter's
	// timeout (Envoy's default is 20 ms, which a loaded test machine can
	// miss; a missed answer is a failure, allowed or denied as the filter
	// says).
	RateLimitTimeout time.Duration
	// Logger receives a line per request and per charge on stream done
	// at debug level, and the warnings Envoy would log.
	Logger *slog.Logger
}

// Emulator is a started emulated Envoy: its listeners serve until Close.
type Emulator struct {
	opts      Options
	log       *slog.Logger
	clusters  map[string]*cluster
	listeners []*listener
	inFlight  inFlight // streams, and their charges on stream done
}

// inFlight counts the streams being served and the charges sent on their
// end not yet answered; Settle waits for none. A stream counts from the
// moment it is read, before its response is written, so a client that has
// the response and then settles waits for its charge too.
type inFlight struct {
	mu   sync.Mutex
	n    int
	none *sync.Cond
}

func (f *inFlight) add(d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.none == nil {
		f.none = sync.NewCond(&f.mu)
	}
	f.n += d
	if f.n == 0 {
		f.none.Broadcast()
	}
}

func (f *inFlight) wait() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 {
		f.none.Wait()
	}
}

type listener struct {
	name, configured string // the bootstrap's name and address
	ln               net.Listener
	srv              *http.Server
}

// LoadFile reads a YAML (or JSON) Envoy v3 bootstrap strictly: an unknown
// field or typed config is an error, and so is what Envoy's own proto
// constraints refuse.
func LoadFile(path string) (*bootstrapv3.Bootstrap, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Load(raw)
}

// Load decodes a YAML (or JSON) Envoy v3 bootstrap as LoadFile does.
func Load(yamlOrJSON []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSON(yamlOrJSON)
	if err != nil {
		return nil, fmt.Errorf("the bootstrap is not YAML: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		return nil, fmt.Errorf("not an Envoy v3 bootstrap: %w", err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("the bootstrap breaks the constraints of Envoy's own protos: %w", err)
	}
	return &b, nil
}

// Start builds the listeners and clusters of b and serves the listeners.
func Start(b *bootstrapv3.Bootstrap, opts Options) (*Emulator, error) {
	e := &Emulator{opts: opts, log: opts.Logger, clusters: map[string]*cluster{}}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.opts.ServiceCluster == "" {
		e.opts.ServiceCluster = b.GetNode().GetCluster()
	}
	sr := b.GetStaticResources()
	if b.GetDynamicResources() != nil {
		return nil, errors.New("dynamic_resources (xDS) are not emulated: give the listeners, routes and clusters statically")
	}
	for _, c := range sr.GetClusters() {
		cl, err := newCluster(c)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", c.GetName(), err)
		}
		e.clusters[c.GetName()] = cl
	}
	type pending struct {
		l *listener
		h http.Handler
	}
	var built []pending
	for i, l := range sr.GetListeners() {
		addr, err := socketAddr(l.GetAddress())
		if err != nil {
			return nil, fmt.Errorf("listener %d (%s): %w", i, l.GetName(), err)
		}
		h, err := e.newConnectionManager(l)
		if err != nil {
			return nil, fmt.Errorf("listener %s: %w", orDefault(l.GetName(), addr), err)
		}
		built = append(built, pending{&listener{name: l.GetName(), configured: addr}, h})
	}
	for _, p := range built {
		at := p.l.configured
		if to, ok := opts.Addrs[at]; ok {
			at = to
		}
		ln, err := net.Listen("tcp", at)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("listener %s: %w", orDefault(p.l.name, p.l.configured), err)
		}
		p.l.ln = ln
		p.l.srv = &http.Server{Handler: p.h, ReadHeaderTimeout: 10 * time.Second}
		e.listeners = append(e.listeners, p.l)
		go func() { _ = p.l.srv.Serve(ln) }()
	}
	return e, nil
}

// Addr is where the listener named name, or configured at the address
// name ("0.0.0.0:8888"), really listens; "" if there is none.
func (e *Emulator) Addr(name string) string {
	for _, l := range e.listeners {
		if l.name == name || l.configured == name {
			return l.ln.Addr().String()
		}
	}
	return ""
}

// Settle waits until every stream being served has ended and every charge
// sent on stream done has been answered (or has failed): a test that asks
// right after a response sees the charge counted, as it would after the
// few milliseconds Envoy takes.
func (e *Emulator) Settle() { e.inFlight.wait() }

// Close stops the listeners and waits for the charges in flight.
func (e *Emulator) Close() error {
	var errs []error
	for _, l := range e.listeners {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, l.srv.Shutdown(ctx))
		cancel()
	}
	e.inFlight.wait()
	for _, c := range e.clusters {
		c.close()
	}
	return errors.Join(errs...)
}

// dialAddr is where an endpoint configured at addr is reached: a mapped
// address, or one of this emulator's listeners, or addr itself.
func (e *Emulator) dialAddr(addr string) string {
	for _, l := range e.listeners {
		if l.configured == addr {
			return l.ln.Addr().String()
		}
	}
	if to, ok := e.opts.Addrs[addr]; ok {
		return to
	}
	return addr
}

func socketAddr(a *corev3.Address) (string, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return "", errors.New("only socket addresses are emulated")
	}
	if sa.GetProtocol() != corev3.SocketAddress_TCP {
		return "", errors.New("only TCP is emulated")
	}
	if sa.GetNamedPort() != "" {
		return "", errors.New("named ports are not emulated")
	}
	return net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
