// Package sluice is a distributed rate limiter. It decides, for every request an
// API receives, whether it may go through, and stays correct when many API
// instances ask about the same key at the same instant: the read, the decision
// and the write happen as one atomic step inside the Store.
//
// A Limit describes one rule of thumb ("10 requests per second with bursts of
// 20", "600 per sliding minute"). A Limiter checks one or more limits for a key
// and returns a Decision. The Store holds the counters: package memory keeps them
// in process, package redis keeps them in Redis (single node, Sentinel or
// Cluster) so that every instance of an API shares them.
//
// Three rate algorithms are offered, and a concurrency limit:
//
//   - TokenBucket: a bucket of Capacity tokens, initially full, refilled
//     continuously at RefillPerSecond tokens per second. A request of cost k
//     takes k tokens. Bursts up to Capacity pass at once; the long-run rate is
//     the refill rate.
//   - SlidingWindow: at most Limit units per rolling Window. The count of the
//     previous fixed window is weighted by how much of it still overlaps the
//     rolling window, so the boundary burst of a fixed window cannot happen.
//   - FixedWindow: at most Limit units per Window aligned to the Unix epoch.
//   - Concurrency: at most Limit units held at once. A check that passes it
//     takes a lease until released, or until its TTL for a holder that
//     crashed. A check may also reserve its cost as an estimate and settle
//     the actual cost later. See Holder.
//
// A check is all-or-nothing: it is allowed only if every limit allows it, and a
// denied check consumes nothing in any limit. Times are integer milliseconds.
//
// Changing a limit keeps its counters when its name, algorithm and window stay
// the same (raising a capacity does not hand everyone a fresh quota); a new
// algorithm or window starts fresh counters. A window's counts are then judged
// against the new limit, so a lowered limit can leave a subject over it until
// enough has slid out. A token bucket keeps its level and refills from then on
// at the new rate up to the new capacity (when the rate's unit changes, only
// whole tokens carry over). A retry_after reported under the new figures always
// holds.
//
// # The library
//
//	store := memory.New(memory.Options{}) // or a Redis store shared by every instance
//	lim, err := sluice.NewLimiter(store, "api", sluice.TokenBucket(20, 10).Named("burst"))
//	d, err := lim.Allow(ctx, clientIP)
//	if err == nil && !d.Allowed {
//		// answer 429: with no other traffic, the same request fits after d.RetryAfter
//	}
//
// What a library user needs is Limit and its constructors (TokenBucket,
// SlidingWindow, FixedWindow, PerSecond, PerMinute, PerHour), Limiter,
// Decision and LimitDecision, Store and Request, FailureMode, and the errors
// ErrInvalid and ErrStoreUnavailable. Package ratelimitheader writes a
// Decision as HTTP headers; package middleware limits a net/http handler.
//
// # For the service
//
// The other declarations serve the rate-limit service (sluice serve) and the
// stores, and a library user can pass them by: the catalog of tenants, API
// keys and rules (Catalog, Tenant, APIKey, Role, Rule, SubjectReset, Event,
// Snapshot, RouteTable and the name and route checks of catalog.go and
// route.go), and the counter keys every store derives alike (Keys, LimitKey,
// SubjectTag in key.go).
package sluice
