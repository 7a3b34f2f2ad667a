package middleware

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
)

// LimitByIP is the common case in one line: at most n requests per client
// address in any window of length per (a sliding window), counted in this
// process, the address taken from the connection (no proxy trusted).
//
//	http.ListenAndServe(":8080", middleware.LimitByIP(100, time.Minute)(mux))
//
// Denied requests get 429 with an exact Retry-After, as with New. For
// limits shared by several instances (a Redis store), proxies to trust, or
// other keys, use New. It panics if n or per is not positive, as
// regexp.MustCompile does on a bad pattern: a limit written in the code is
// the programmer's to get right.
func LimitByIP(n int64, per time.Duration) func(http.Handler) http.Handler {
	limit := sluice.SlidingWindow(n, per).Named("per_ip")
	if err := limit.Validate(); err != nil {
		panic(fmt.Sprintf("middleware.LimitByIP(%d, %v): %v", n, per, err))
	}
	mw, err := New(Options{
		Store:  memory.New(memory.Options{}),
		Name:   "limit_by_ip",
		Limits: []sluice.Limit{limit},
		Key:    ClientIP(TrustedProxies{}),
	})
	if err != nil {
		panic(fmt.Sprintf("middleware.LimitByIP(%d, %v): %v", n, per, err))
	}
	return mw
}
