package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// GatewayRequests counts the gateway's answers per route and status class,
// and times its upstream exchanges. Labels stay bounded: route names come
// from the configuration (requests that match none count under
// RouteUnmatched) and status codes are grouped into classes. A nil
// *GatewayRequests counts nothing.
type GatewayRequests struct {
	requests *prometheus.CounterVec
	upstream *prometheus.HistogramVec

	mu     sync.Mutex
	routes map[string]*GatewayRoute
}

// RouteUnmatched is the route label of requests that matched no route.
const RouteUnmatched = "_unmatched"

// statusClasses are the class label values, indexed by status/100 - 1.
var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

// NewGatewayRequests registers the gateway's request metrics on reg.
func NewGatewayRequests(reg prometheus.Registerer) *GatewayRequests {
	g := &GatewayRequests{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_requests_total",
			Help: "Requests the gateway answered, by route and status class (1xx-5xx); route _unmatched for requests no route matched.",
		}, []string{"route", "class"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_gateway_upstream_duration_seconds",
			Help:    "Time from forwarding a request upstream to the end of the answer, by route and status class.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "class"}),
		routes: map[string]*GatewayRoute{},
	}
	reg.MustRegister(g.requests, g.upstream)
	return g
}

// GatewayRoute holds one route's series, resolved once so that counting a
// request costs no label lookup.
type GatewayRoute struct {
	requests [len(statusClasses)]prometheus.Counter
	upstream [len(statusClasses)]prometheus.Observer
}

// Route returns the series of route; nil on a nil *GatewayRequests.
func (g *GatewayRequests) Route(route string) *GatewayRoute {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.routes[route]; ok {
		return r
	}
	r := &GatewayRoute{}
	for i, class := range statusClasses {
		r.requests[i] = g.requests.WithLabelValues(route, class)
		r.upstream[i] = g.upstream.WithLabelValues(route, class)
	}
	g.routes[route] = r
	return r
}

// DropRoute removes the series of a route the configuration no longer has.
func (g *GatewayRequests) DropRoute(route string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.routes, route)
	g.requests.DeletePartialMatch(prometheus.Labels{"route": route})
	g.upstream.DeletePartialMatch(prometheus.Labels{"route": route})
}

func classIndex(status int) (int, bool) {
	i := status/100 - 1
	return i, i >= 0 && i < len(statusClasses)
}

// Answered counts an answer of status.
func (r *GatewayRoute) Answered(status int) {
	if r == nil {
		return
	}
	if i, ok := classIndex(status); ok {
		r.requests[i].Inc()
	}
}

// Upstream times an upstream exchange that ended in status.
func (r *GatewayRoute) Upstream(status int, d time.Duration) {
	if r == nil {
		return
	}
	if i, ok := classIndex(status); ok {
		r.upstream[i].Observe(d.Seconds())
	}
}
