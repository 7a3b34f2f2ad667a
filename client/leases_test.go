package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/client"
)

// leasedRule is a rule of acme on route of one fixed window of limit per
// hour that leases.
func leasedRule(route string, limit int64) sluice.Rule {
	l := sluice.FixedWindow(limit, time.Hour).Named("hour")
	l.Lease = sluice.LeaseAuto
	return sluice.Rule{Tenant: "acme", Name: "hot", Route: route, Limits: []sluice.Limit{l}, FailureMode: sluice.FailClosed}
}

// countingTransport counts the calls made through it.
type countingTransport struct{ calls atomic.Int64 }

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.calls.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func remaining(t *testing.T, c *client.Client, route string) int64 {
	t.Helper()
	res, err := c.Check(context.Background(), route, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

// TestLeasedLimitersAdmitExactlyTheLimit: three holders, 60 callers each,
// against a limit of 200: exactly 200 admitted together, most of them
// without a call to the service, and once they close nothing is lost.
func TestLeasedLimitersAdmitExactlyTheLimit(t *testing.T) {
	url, secret := startService(t, leasedRule("/hot", 200))
	ctx := context.Background()
	counter := &countingTransport{}
	c, err := client.New(url, secret, client.WithHTTPClient(&http.Client{Transport: counter, Timeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	var limiters []*client.LeasedLimiter
	for h := range 3 {
		l := c.NewLeasedLimiter("/hot", "s", client.LeaseOptions{Holder: "holder-" + string(rune('a'+h)), Want: 25, TTL: 10 * time.Second})
		limiters = append(limiters, l)
		for range 60 {
			wg.Go(func() {
				for range 10 {
					res, err := l.Allow(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					} else {
						denied.Add(1)
						if res.RetryAfter <= 0 {
							t.Errorf("deny without retry_after: %+v", res)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if admitted.Load() != 200 || denied.Load() != 3*60*10-200 {
		t.Fatalf("admitted %d, denied %d: want exactly 200 of %d", admitted.Load(), denied.Load(), 3*60*10)
	}
	// 200 admitted with far fewer calls: a lease call per up to 25.
	// (Every deny is a call: the store decides each.)
	if calls := counter.calls.Load() - denied.Load(); calls > 200/2 {
		t.Errorf("%d calls for 200 admits, want a lease call per many", calls)
	}
	for _, l := range limiters {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := remaining(t, c, "/hot"); got != 0 {
		t.Fatalf("%d left, want 0", got)
	}
	if _, err := limiters[0].Allow(ctx); !errors.Is(err, client.ErrLimiterClosed) {
		t.Fatalf("Allow after Close: %v", err)
	}
}

// TestLeasedLimiterReturnsOnClose: what was not admitted goes back.
func TestLeasedLimiterReturnsOnClose(t *testing.T) {
	url, secret := startService(t, leasedRule("/hot", 50))
	ctx := context.Background()
	c, _ := client.New(url, secret)
	l := c.NewLeasedLimiter("/hot", "s", client.LeaseOptions{Want: 20})
	for range 3 {
		if res, err := l.Allow(ctx); err != nil || !res.Allowed || res.Rule != "hot" {
			t.Fatalf("%+v %v", res, err)
		}
	}
	if l.Held() != 17 {
		t.Fatalf("held %d, want 17", l.Held())
	}
	if got := remaining(t, c, "/hot"); got != 30 {
		t.Fatalf("%d left while 20 are leased, want 30", got)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, c, "/hot"); got != 47 {
		t.Fatalf("%d left after Close, want 47 (3 admitted)", got)
	}
	// A rule that does not lease is refused clearly.
	url2, secret2 := startService(t, sluice.Rule{Tenant: "acme", Name: "plain", Route: "/plain",
		Limits: []sluice.Limit{sluice.FixedWindow(5, time.Hour).Named("hour")}})
	c2, _ := client.New(url2, secret2)
	_, err := c2.NewLeasedLimiter("/plain", "s", client.LeaseOptions{}).Allow(ctx)
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusConflict || e.Code != "rule_not_leased" || !errors.Is(err, sluice.ErrConflict) {
		t.Fatalf("a rule that does not lease: %v", err)
	}
}

// TestLeasedLimiterServiceDown: with the service gone, the holder admits
// exactly the units it holds, then every request is an error (for the
// caller's failure mode), never an admit it was not granted.
func TestLeasedLimiterServiceDown(t *testing.T) {
	url, secret, stop := startStoppableService(t, leasedRule("/hot", 100))
	ctx := context.Background()
	c, _ := client.New(url, secret, client.WithTimeout(time.Second))
	l := c.NewLeasedLimiter("/hot", "s", client.LeaseOptions{Want: 10, TTL: 30 * time.Second})
	if res, err := l.Allow(ctx); err != nil || !res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	stop()
	for i := range 9 {
		if res, err := l.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("admit %d from the 9 held: %+v %v", i, res, err)
		}
	}
	for i := range 3 {
		if res, err := l.Allow(ctx); err == nil {
			t.Fatalf("request %d past the lease with the service down: %+v, want an error", i, res)
		}
	}
	if l.Held() != 0 {
		t.Fatalf("held %d", l.Held())
	}
}

// renewBodies records the bodies of the renew calls made through it.
type renewBodies struct {
	mu     sync.Mutex
	bodies []string
}

func (t *renewBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/renew") {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		t.mu.Lock()
		t.bodies = append(t.bodies, string(b))
		t.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestLeasedLimiterRenewsNamingItsRoute: a LeasedLimiter's renew names the
// lease's route and subject, so the service renews in one store call, and
// gives back what it held.
func TestLeasedLimiterRenewsNamingItsRoute(t *testing.T) {
	url, secret := startService(t, leasedRule("/hot", 50))
	ctx := context.Background()
	rec := &renewBodies{}
	c, err := client.New(url, secret, client.WithHTTPClient(&http.Client{Transport: rec, Timeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	// Want 4: the fifth request renews, with nothing left in hand.
	l := c.NewLeasedLimiter("/hot", "s", client.LeaseOptions{Want: 4})
	for range 5 {
		if res, err := l.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("%+v %v", res, err)
		}
	}
	rec.mu.Lock()
	bodies := rec.bodies
	rec.mu.Unlock()
	if len(bodies) != 1 || !strings.Contains(bodies[0], `"route":"/hot"`) || !strings.Contains(bodies[0], `"subject":"s"`) ||
		!strings.Contains(bodies[0], `"unused":0`) {
		t.Fatalf("renew bodies %q; want one naming route /hot and subject s", bodies)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, c, "/hot"); got != 45 {
		t.Fatalf("%d left after Close, want 45 (5 admitted)", got)
	}
}

// TestLeasedLimiterResetCountsDown: a request admitted from the lease says
// the time left until the window its units came from ends, counted down
// since the lease call, not the call's figure however long ago it was.
func TestLeasedLimiterResetCountsDown(t *testing.T) {
	url, secret := startService(t, leasedRule("/hot", 50))
	ctx := context.Background()
	c, _ := client.New(url, secret)
	l := c.NewLeasedLimiter("/hot", "s", client.LeaseOptions{Want: 20, TTL: 10 * time.Second})
	t.Cleanup(func() { l.Close(ctx) })
	first, err := l.Allow(ctx)
	if err != nil || !first.Allowed {
		t.Fatalf("%+v %v", first, err)
	}
	time.Sleep(300 * time.Millisecond)
	later, err := l.Allow(ctx)
	if err != nil || !later.Allowed || l.Held() != 18 {
		t.Fatalf("%+v %v, held %d: want an admit from the lease", later, err, l.Held())
	}
	// At least 300ms later, to the answer's millisecond.
	if later.ResetAfter <= 0 || later.ResetAfter > first.ResetAfter-299*time.Millisecond ||
		later.Limits[0].ResetAfter != later.ResetAfter {
		t.Fatalf("reset after %v (limit %v) 300ms after the lease call's %v", later.ResetAfter, later.Limits[0].ResetAfter, first.ResetAfter)
	}
}
