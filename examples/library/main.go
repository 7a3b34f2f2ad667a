// Command library shows the Sluice library on its own: a Limiter over the
// in-memory store, checking two limits at once for a few users.
//
//	go run ./examples/library
//
// Swap memory.New for redis.Open("redis://127.0.0.1:6379/0", redis.Options{})
// and every process running this code shares the same counters.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/memory"
)

func main() {
	store := memory.New(memory.Options{})
	defer store.Close()

	// Bursts of up to 5, refilled at 2 per second, and at most 20 per
	// sliding minute. A request passes only if both allow it.
	limiter, err := sluice.NewLimiter(store, "example",
		sluice.TokenBucket(5, 2).Named("burst"),
		sluice.SlidingWindow(20, time.Minute).Named("minute"),
	)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	for i := 1; i <= 7; i++ {
		d, err := limiter.Allow(ctx, "alice")
		if err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			fmt.Printf("alice request %d: allowed, %d left\n", i, d.Remaining)
		} else {
			fmt.Printf("alice request %d: denied, retry in %v\n", i, d.RetryAfter)
		}
	}

	// Another subject has its own counters.
	d, _ := limiter.Allow(ctx, "bob")
	fmt.Printf("bob request 1: allowed=%v, %d left\n", d.Allowed, d.Remaining)

	// A cost larger than a limit can ever hold is an error, not a deny.
	if _, err := limiter.AllowN(ctx, "alice", 6); err != nil {
		fmt.Println("alice asks for 6 at once:", err)
	}

	// Wait exactly as long as the decision says, and the request passes.
	d, _ = limiter.Allow(ctx, "alice")
	time.Sleep(d.RetryAfter)
	d, _ = limiter.Allow(ctx, "alice")
	fmt.Printf("alice after waiting retry_after: allowed=%v\n", d.Allowed)
}
