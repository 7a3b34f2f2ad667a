package console

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/metrics"
)

// TestTopKKeepsTheHeavyHitters: every subject seen more than n/k times is
// kept, and each count is at most its error bound above the truth.
func TestTopKKeepsTheHeavyHitters(t *testing.T) {
	top := newTopK(5)
	truth := map[string]uint64{}
	add := func(s string) { top.add(s); truth[s]++ }
	for i := range 2000 {
		switch {
		case i%4 == 0:
			add("heavy-a") // 500 of 2000: far above n/k = 400
		case i%5 == 0:
			add("heavy-b") // 400
		default:
			add(fmt.Sprintf("tail-%d", i)) // each once
		}
	}
	got := top.top(10)
	if len(got) != 5 {
		t.Fatalf("%d hitters kept, want the bound 5", len(got))
	}
	if got[0].Subject != "heavy-a" || got[1].Subject != "heavy-b" {
		t.Fatalf("top two %+v, want heavy-a then heavy-b", got[:2])
	}
	for _, h := range got {
		if h.Count < truth[h.Subject] || h.Count-h.Err > truth[h.Subject] {
			t.Errorf("%s: count %d ± %d, true count %d", h.Subject, h.Count, h.Err, truth[h.Subject])
		}
	}
}

func TestLiveCountsPerRuleAndForgetsTheOldSeconds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLive(func() time.Time { return now })
	acme := metrics.Labels{Source: metrics.SourceHTTP, Tenant: "acme", Rule: "orders"}
	other := metrics.Labels{Source: metrics.SourceHTTP, Tenant: "globex", Rule: "orders"}
	for range 3 {
		l.Observe(acme, "u1", check.Allowed)
	}
	l.Observe(acme, "u1", check.Denied)
	l.Observe(acme, strings.Repeat("x", 500), check.Denied)
	l.Observe(acme, "shadowed", check.ShadowDenied)
	l.Observe(other, "g", check.Degraded)

	onlyAcme := func(lb metrics.Labels) bool { return lb.Tenant == "acme" }
	v := l.Snapshot(onlyAcme)
	if len(v) != 1 || v[0].Name() != "acme/orders" {
		t.Fatalf("visible rules %+v", v)
	}
	want := outcomeCounts{Allowed: 3, Denied: 2, ShadowDenied: 1}
	if v[0].Total != want || v[0].Series[len(v[0].Series)-1] != want || v[0].Rate != 0.6 {
		t.Errorf("totals %+v, last step %+v, rate %v; want %+v and 0.6/s", v[0].Total, v[0].Series[len(v[0].Series)-1], v[0].Rate, want)
	}
	if len(v[0].Top) != 2 || v[0].Top[0].Subject != "u1" || len([]rune(v[0].Top[1].Subject)) != maxSubjectShown+1 {
		t.Errorf("top denied %+v", v[0].Top)
	}
	for _, h := range v[0].Top {
		if h.Subject == "shadowed" {
			t.Errorf("the top denied subjects count a shadow denial (the request was allowed): %+v", v[0].Top)
		}
	}

	now = now.Add(20 * time.Second) // out of the rate, still in the window
	if v := l.Snapshot(onlyAcme); v[0].Rate != 0 || v[0].Total != want {
		t.Errorf("20 s later: rate %v, totals %+v", v[0].Rate, v[0].Total)
	}
	now = now.Add(liveWindow * time.Second) // the slot is reused for a new second
	l.Observe(acme, "u2", check.Allowed)
	if v := l.Snapshot(onlyAcme); v[0].Total != (outcomeCounts{Allowed: 1}) {
		t.Errorf("a window later: totals %+v, want the new second's only", v[0].Total)
	}
	l.Forget(onlyAcme)
	if v := l.Snapshot(func(metrics.Labels) bool { return true }); len(v) != 1 || v[0].Labels != other {
		t.Errorf("after Forget: %+v", v)
	}
}

func TestLiveFollowsABoundedNumberOfRules(t *testing.T) {
	l := NewLive(nil)
	for i := range maxLiveRules + 10 {
		l.Observe(metrics.Labels{Source: metrics.SourceHTTP, Tenant: "t", Rule: fmt.Sprint(i)}, "s", check.Denied)
	}
	if n := len(l.Snapshot(func(metrics.Labels) bool { return true })); n != maxLiveRules {
		t.Errorf("%d rules followed, want the bound %d", n, maxLiveRules)
	}
}

func TestSessionsExpire(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := newSessions(time.Hour, func() time.Time { return now })
	sess, err := s.start("secret", httpapiCaller())
	if err != nil {
		t.Fatal(err)
	}
	req := requestWithCookie(sess.id)
	if s.get(req) != sess {
		t.Fatal("a fresh session is not found")
	}
	now = now.Add(time.Hour)
	if s.get(req) != nil {
		t.Error("a session past its TTL is still served")
	}
}

func httpapiCaller() httpapi.Caller { return httpapi.Caller{Operator: true} }

func requestWithCookie(id string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/console/", nil)
	r.AddCookie(&http.Cookie{Name: cookieName, Value: id})
	return r
}

// BenchmarkLiveObserve is the console's cost on every check: allowed checks
// of one rule from parallel goroutines (the contended case), and denies of
// many subjects (the sketch's replacements).
func BenchmarkLiveObserve(b *testing.B) {
	labels := metrics.Labels{Source: metrics.SourceHTTP, Tenant: "acme", Rule: "orders"}
	b.Run("allowed_parallel", func(b *testing.B) {
		l := NewLive(nil)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Observe(labels, "user-42", check.Allowed)
			}
		})
	})
	b.Run("denied_distinct_subjects", func(b *testing.B) {
		l := NewLive(nil)
		subjects := make([]string, 1024)
		for i := range subjects {
			subjects[i] = fmt.Sprintf("user-%d", i)
		}
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			l.Observe(labels, subjects[i%len(subjects)], check.Denied)
		}
	})
}
