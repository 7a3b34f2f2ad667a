package loadgen_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/loadgen"
	"github.com/sluicelabs/sluice/memory"
)

func TestClosedModelCountsDeniesAsAnswers(t *testing.T) {
	store := memory.New(memory.Options{})
	defer store.Close()
	target := loadgen.StoreCheck{Store: store, Rule: "bench", Limits: []sluice.Limit{sluice.FixedWindow(100, 24*time.Hour).Named("day")}, Cost: 1}
	res, err := loadgen.Run(context.Background(), target, loadgen.Options{Concurrency: 8, Duration: 200 * time.Millisecond, HotFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 100 || res.Errors != 0 || res.Denied == 0 || res.Sent != res.Allowed+res.Denied {
		t.Fatalf("one hot subject with a limit of 100: %+v", res)
	}
	if res.Throughput() <= 0 || res.Percentile(0.5) <= 0 || res.Max() < res.Percentile(0.99) {
		t.Fatalf("no latency figures: %+v", res)
	}
}

func TestOpenModelNeverSendsMoreThanDue(t *testing.T) {
	var calls atomic.Int64
	target := loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		calls.Add(1)
		return loadgen.Allowed, nil
	})
	const rate, duration = 1000.0, 300 * time.Millisecond
	res, err := loadgen.Run(context.Background(), target, loadgen.Options{Rate: rate, Concurrency: 4, Duration: duration})
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "open" || res.Sent == 0 || res.Sent != calls.Load() {
		t.Fatalf("%+v (calls %d)", res, calls.Load())
	}
	// Due times are start + i/rate for i = 0, 1, ...: at most rate×duration+1.
	if max := int64(rate*duration.Seconds()) + 1; res.Sent+res.Dropped > max {
		t.Fatalf("sent %d (+%d dropped), more than the %d due in %v", res.Sent, res.Dropped, max, duration)
	}
}

func TestOpenModelChargesQueueingToLatency(t *testing.T) {
	// One worker, a target that takes 20ms, 200 requests/s: requests queue,
	// and their latency must include the wait, not just the 20ms.
	target := loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		time.Sleep(20 * time.Millisecond)
		return loadgen.Allowed, nil
	})
	res, err := loadgen.Run(context.Background(), target, loadgen.Options{Rate: 200, Concurrency: 1, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Late == 0 || res.Max() < 40*time.Millisecond {
		t.Fatalf("queueing not charged: late %d, max latency %v", res.Late, res.Max())
	}
}

func TestErrorsAreCountedWithTheirCause(t *testing.T) {
	target := loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		return 0, errors.New("store down")
	})
	res, err := loadgen.Run(context.Background(), target, loadgen.Options{Concurrency: 2, Duration: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || res.Allowed+res.Denied != 0 || res.FirstError == nil || res.FirstError.Error() != "store down" {
		t.Fatalf("%+v", res)
	}
}

func TestHTTPCheckTarget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Route, Subject string
			Cost           int64
		}
		if r.URL.Path != "/v1/check" || r.Header.Get("X-API-Key") != "sk_test" || json.NewDecoder(r.Body).Decode(&body) != nil || body.Route != "/api/x" || body.Cost != 2 {
			http.Error(w, `{"error":{"code":"bad","message":"unexpected request"}}`, http.StatusBadRequest)
			return
		}
		switch body.Subject {
		case "hot":
			w.WriteHeader(http.StatusTooManyRequests)
		case "shed":
			http.Error(w, `{"error":{"code":"overloaded","message":"Too many requests in flight."}}`, http.StatusServiceUnavailable)
		case "down":
			http.Error(w, `{"error":{"code":"store_unavailable","message":"The rate-limit store does not answer."}}`, http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	target := loadgen.NewHTTPCheck(srv.URL, "sk_test", "/api/x", 2, 4)
	ctx := context.Background()
	if out, err := target.Do(ctx, "a"); err != nil || out != loadgen.Allowed {
		t.Fatalf("200: %v %v", out, err)
	}
	if out, err := target.Do(ctx, "hot"); err != nil || out != loadgen.Denied {
		t.Fatalf("429: %v %v", out, err)
	}
	if out, err := target.Do(ctx, "shed"); err != nil || out != loadgen.Shed {
		t.Fatalf("503 overloaded must be shed: %v %v", out, err)
	}
	if _, err := target.Do(ctx, "down"); err == nil || !strings.Contains(err.Error(), "store_unavailable") {
		t.Fatalf("503 store_unavailable must be a failure with the service's message: %v", err)
	}
	bad := loadgen.NewHTTPCheck(srv.URL, "wrong", "/api/x", 2, 4)
	if _, err := bad.Do(ctx, "a"); err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "unexpected request") {
		t.Fatalf("400 must be an error with the service's message: %v", err)
	}
	ref := loadgen.NewHTTPGet(srv.URL+"/healthz", 4)
	if _, err := ref.Do(ctx, ""); err == nil {
		t.Fatal("the fake server answers 400 to GET; want an error")
	}
}

func TestInvalidOptions(t *testing.T) {
	target := loadgen.TargetFunc(func(context.Context, string) (loadgen.Outcome, error) { return loadgen.Allowed, nil })
	for name, opts := range map[string]loadgen.Options{
		"negative_rate":  {Rate: -1},
		"hot_above_one":  {HotFraction: 1.5},
		"no_concurrency": {Concurrency: -1},
		"no_subjects":    {Subjects: -3},
	} {
		if _, err := loadgen.Run(context.Background(), target, opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := loadgen.Run(context.Background(), nil, loadgen.Options{}); err == nil {
		t.Error("nil target accepted")
	}
}

// TestAllowedBySecondAttributesEachAllowToItsSeconds: every allowed request
// is counted once, under the Unix second it was sent in and the one it was
// answered in, so a per-window count can tell which ones crossed a
// boundary; denies are not counted.
func TestAllowedBySecondAttributesEachAllowToItsSeconds(t *testing.T) {
	var calls atomic.Int64
	target := loadgen.TargetFunc(func(ctx context.Context, subject string) (loadgen.Outcome, error) {
		switch calls.Add(1) {
		case 1:
			// The first answer comes in the next second: it crossed.
			now := time.Now()
			time.Sleep(now.Truncate(time.Second).Add(time.Second + 10*time.Millisecond).Sub(now))
		case 2:
			return loadgen.Denied, nil
		}
		return loadgen.Allowed, nil
	})
	now := time.Now()
	before := now.Unix()
	// The run outlasts the first request's sleep past the next second.
	d := now.Truncate(time.Second).Add(time.Second + 100*time.Millisecond).Sub(now)
	res, err := loadgen.Run(context.Background(), target, loadgen.Options{Concurrency: 1, Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	if res.Denied != 1 || res.Allowed < 2 {
		t.Fatalf("want one deny and allows: %+v", res)
	}
	var total, crossed int64
	for i, c := range res.AllowedBySecond {
		if c.Sent < before || c.Answered > after || c.Answered < c.Sent || c.Allowed <= 0 {
			t.Fatalf("entry %d %+v outside [%d, %d] or answered before sent", i, c, before, after)
		}
		if i > 0 && !(res.AllowedBySecond[i-1].Sent < c.Sent || res.AllowedBySecond[i-1].Sent == c.Sent && res.AllowedBySecond[i-1].Answered < c.Answered) {
			t.Fatalf("not sorted or not merged: %+v", res.AllowedBySecond)
		}
		total += c.Allowed
		if c.Answered > c.Sent {
			crossed += c.Allowed
		}
	}
	if total != res.Allowed || crossed != 1 {
		t.Fatalf("counted %d allowed (%d crossing a second), want %d (1): %+v", total, crossed, res.Allowed, res.AllowedBySecond)
	}
	rep := loadgen.NewReport("t", res)
	b, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(b), `"allowed_by_second":[{"sent":`) {
		t.Fatalf("report JSON lacks allowed_by_second: %s %v", b, err)
	}
}
