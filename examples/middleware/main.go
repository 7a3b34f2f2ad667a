// Command middleware is a plain net/http server rate-limited by Sluice's
// middleware on the in-process memory store:
//
//	go run ./examples/middleware
//	curl -i localhost:8090/hello                      # limited by client IP
//	curl -i -H 'X-API-Key: k1' localhost:8090/api/hello  # limited by API key
//
// The sixth request within a few seconds gets 429 with Retry-After and an
// application/problem+json body. Swap memory.New for a Redis store
// (github.com/sluicelabs/sluice/redis) to share the limits between instances.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/middleware"
)

func main() {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "localhost:8090"
	}
	store := memory.New(memory.Options{})
	defer store.Close()

	// Everyone: 5 requests in a burst, then 1 per second, per client IP.
	// With a load balancer in front, list it in TrustedProxies.CIDRs so the
	// client's address is read from X-Forwarded-For; without, the header is
	// ignored (a client could write anything in it).
	perIP, err := middleware.New(middleware.Options{
		Store:  store,
		Name:   "public",
		Limits: []sluice.Limit{sluice.TokenBucket(5, 1).Named("burst")},
		Key:    middleware.ClientIP(middleware.TrustedProxies{}),
	})
	if err != nil {
		log.Fatal(err)
	}

	// API: 100 per sliding minute per API key, and 10 per second per key;
	// requests without a key share one bucket (so omitting it buys nothing).
	perKey, err := middleware.New(middleware.Options{
		Store: store,
		Name:  "api",
		Limits: []sluice.Limit{
			sluice.SlidingWindow(100, time.Minute).Named("minute"),
			sluice.TokenBucket(10, 10).Named("second"),
		},
		Key: middleware.Header("X-API-Key"),
	})
	if err != nil {
		log.Fatal(err)
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello; %s requests left\n", w.Header().Get("X-RateLimit-Remaining"))
	})
	mux := http.NewServeMux()
	mux.Handle("/hello", perIP(hello))
	mux.Handle("/api/", perKey(hello))

	log.Printf("listening on http://%s (try /hello and /api/hello)", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
