package console

import (
	"sort"
	"sync"
	"time"

	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/metrics"
)

// Bounds of what the live view keeps in memory.
const (
	// liveWindow is how far back the overview looks, one slot per second.
	liveWindow = 15 * 60
	// maxLiveRules bounds the rules followed; decisions of rules past it
	// are not shown (the Prometheus metrics still count them).
	maxLiveRules = 1000
	// topSubjects is the size of each rule's heavy-hitters table.
	topSubjects = 20
	// maxSubjectShown bounds the bytes of a subject kept in the table, so
	// the memory bound does not depend on what clients send.
	maxSubjectShown = 200
)

// Live follows the decisions of this process's check engine, as the
// engine's Observer: per rule, the decisions of each of the last 15 minutes'
// seconds, and the subjects denied most often. It is per instance: behind a
// load balancer each instance sees its own share of the traffic.
type Live struct {
	now func() time.Time

	mu    sync.RWMutex
	rules map[metrics.Labels]*ruleLive
}

// ruleLive is what Live keeps of one rule.
type ruleLive struct {
	mu sync.Mutex
	// sec[i] is the unix second slot i counts; counts of an older second
	// are stale and read as zero.
	sec    [liveWindow]int64
	counts [liveWindow]outcomeCounts
	denied *topK
}

// outcomeCounts counts the decisions of one second by outcome.
type outcomeCounts struct{ Allowed, Denied, ShadowDenied, Degraded uint64 }

func (c *outcomeCounts) add(o outcomeCounts) {
	c.Allowed += o.Allowed
	c.Denied += o.Denied
	c.ShadowDenied += o.ShadowDenied
	c.Degraded += o.Degraded
}

func (c outcomeCounts) total() uint64 { return c.Allowed + c.Denied + c.ShadowDenied + c.Degraded }

// NewLive returns an empty Live reading time from now (default time.Now).
func NewLive(now func() time.Time) *Live {
	if now == nil {
		now = time.Now
	}
	return &Live{now: now, rules: make(map[metrics.Labels]*ruleLive)}
}

// Observe records one decision; it is a check.Observer.
func (l *Live) Observe(labels metrics.Labels, subject string, outcome check.Outcome) {
	r := l.rule(labels)
	if r == nil {
		return
	}
	sec := l.now().Unix()
	i := sec % liveWindow
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sec[i] != sec {
		r.sec[i], r.counts[i] = sec, outcomeCounts{}
	}
	c := &r.counts[i]
	switch outcome {
	case check.Allowed:
		c.Allowed++
	case check.Denied:
		c.Denied++
	case check.ShadowDenied:
		c.ShadowDenied++
	case check.Degraded:
		c.Degraded++
	}
	// A shadow denial let the request through: it is counted above, but
	// the top denied subjects are the ones really refused.
	if outcome == check.Denied {
		if len(subject) > maxSubjectShown {
			subject = subject[:maxSubjectShown] + "…"
		}
		r.denied.add(subject)
	}
}

func (l *Live) rule(labels metrics.Labels) *ruleLive {
	l.mu.RLock()
	r := l.rules[labels]
	l.mu.RUnlock()
	if r != nil {
		return r
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r = l.rules[labels]; r != nil {
		return r
	}
	if len(l.rules) >= maxLiveRules {
		return nil
	}
	r = &ruleLive{denied: newTopK(topSubjects)}
	l.rules[labels] = r
	return r
}

// RuleView is what the overview shows of one rule.
type RuleView struct {
	Labels metrics.Labels
	// Total counts the decisions of the whole window; Rate is decisions per
	// second over the last RateSeconds.
	Total outcomeCounts
	Rate  float64
	// Series holds the window in steps of StepSeconds, oldest first.
	Series []outcomeCounts
	Top    []hitter
}

// Name names the rule for people: tenant/rule, or envoy domain/descriptor.
func (v RuleView) Name() string {
	if v.Labels.Domain != "" {
		return "envoy " + v.Labels.Domain + "/" + v.Labels.Rule
	}
	return v.Labels.Tenant + "/" + v.Labels.Rule
}

// View steps and rates.
const (
	StepSeconds = 10
	RateSeconds = 10
)

// Snapshot returns the rules visible under visible, by name.
func (l *Live) Snapshot(visible func(metrics.Labels) bool) []RuleView {
	now := l.now().Unix()
	l.mu.RLock()
	labels := make([]metrics.Labels, 0, len(l.rules))
	rules := make([]*ruleLive, 0, len(l.rules))
	for lb, r := range l.rules {
		if visible(lb) {
			labels = append(labels, lb)
			rules = append(rules, r)
		}
	}
	l.mu.RUnlock()
	out := make([]RuleView, 0, len(rules))
	for i, r := range rules {
		v := RuleView{Labels: labels[i], Series: make([]outcomeCounts, liveWindow/StepSeconds)}
		r.mu.Lock()
		var recent outcomeCounts
		for age := int64(0); age < liveWindow; age++ {
			sec := now - age
			slot := sec % liveWindow
			if slot < 0 || r.sec[slot] != sec {
				continue
			}
			c := r.counts[slot]
			v.Total.add(c)
			v.Series[len(v.Series)-1-int(age/StepSeconds)].add(c)
			if age < RateSeconds {
				recent.add(c)
			}
		}
		v.Top = r.denied.top(10)
		r.mu.Unlock()
		v.Rate = float64(recent.total()) / RateSeconds
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Forget drops what is kept of the rules matching gone (a deleted rule or
// tenant), so a rule created again under the same name starts empty.
func (l *Live) Forget(gone func(metrics.Labels) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for lb := range l.rules {
		if gone(lb) {
			delete(l.rules, lb)
		}
	}
}
