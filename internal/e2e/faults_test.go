package e2e

// The fault suite (issue 10): the real sluice binary under load while its
// Redis or PostgreSQL misbehaves. Every scenario runs one tenant with three
// rules that differ only by failure mode (closed, open, local), each a fixed
// window of faultLimit per hour, and asserts, from the samples of a load
// generator that ran through the whole scenario:
//
//   - statuses by failure mode: every answer is either the store's (200 or
//     429, "degraded": false) or the rule's policy (closed: 503
//     store_unavailable with Retry-After; open: 200 degraded; local: the
//     in-process limiter's answer, degraded), or a shed (503 overloaded,
//     this process out of CPU; counted apart), and a check that started and
//     ended inside the fault got the policy's;
//   - a latency bound: every check answered within faultLatencyBound (the
//     store deadline, 50ms, plus a wide margin for a loaded 2-core machine);
//   - recovery: checks of every rule are answered by Redis again, and stay
//     so, within faultRecoveryBound of the fault's end;
//   - no over-admission: a hot subject of every rule is never allowed more
//     than faultLimit times with "degraded": false per Redis lifetime
//     (degraded answers are the policy's and counted apart).
//
// Scenarios: TestFaultRedisPaused (SIGSTOP/SIGCONT), TestFaultRedisKilled
// (SIGKILL and a new, empty Redis), TestFaultRedisScriptFlush,
// TestFaultRedisClientPause (CLIENT PAUSE 2000 WRITE),
// TestFaultPostgresRefusing and TestFaultPostgresHanging (a TCP proxy
// between sluice and PostgreSQL), TestFaultShutdownUnderLoad (SIGTERM with a
// slow check in flight), TestFaultClusterMasterLost (3 masters + 3
// replicas). Each has its own deadline (faultScenarioBudget) and logs its
// figures with t.Logf: run with -v to read them.
//
// What they found, not fixed here (outside internal/):
//   - admin calls have no deadline on the catalog database: while its
//     connections hang, they wait for it (TestFaultPostgresHanging skips
//     with "known: ...");
//   - /readyz answers 503 catalog_unavailable while the catalog database is
//     down, though DESIGN.md says a catalog outage alone does not make the
//     fleet unready (docs/service.md agrees with the code);
//   - with Redis' default cluster-require-full-coverage yes, losing one
//     master fails every key for about a second before the promotion.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	faultLimit          = 20
	faultWindow         = time.Hour // countedRule's window
	faultLatencyBound   = time.Second
	faultRecoveryBound  = 5 * time.Second
	faultScenarioBudget = 45 * time.Second
)

var faultModes = []string{"closed", "open", "local"}

// faultRig is one sluice serve with the tenant "acme" and its three rules.
type faultRig struct {
	t      *testing.T
	in     *instance
	key    string
	client *http.Client
}

// startFaultRig starts sluice serve on redisURL and dsn with extra flags and
// creates the tenant and its rules.
func startFaultRig(t *testing.T, redisURL, dsn string, extra ...string) *faultRig {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"--addr", addr, "--redis", redisURL, "--database", dsn, "--admin-token", adminToken}, extra...)
	in := startServe(t, t.TempDir(), addr, nil, args...)
	key := setupTenant(in, adminToken, "acme")
	for _, mode := range faultModes {
		in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/"+mode, adminToken, faultRule(mode, faultLimit))
	}
	return &faultRig{t: t, in: in, key: key, client: &http.Client{
		// Far above the latency bound: a slow answer is measured, not cut.
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}}
}

func faultRule(mode string, limit int) map[string]any {
	return countedRule("/"+mode+"*", mode, limit)
}

// sample is one check of the load generator.
type sample struct {
	mode       string
	subject    string
	hot        bool
	sent, done time.Time
	status     int
	code       string
	retryAfter string
	allowed    bool
	degraded   bool
	// resetAfter is the answer's reset_after_ms: with sent, it names the
	// fixed window the check counted in.
	resetAfter time.Duration
	err        error
}

func (s sample) latency() time.Duration { return s.done.Sub(s.sent) }

// storeAnswer reports whether Redis decided the check.
func (s sample) storeAnswer() bool {
	return s.err == nil && !s.degraded && (s.status == http.StatusOK || s.status == http.StatusTooManyRequests)
}

// shed reports whether this instance shed the check as overloaded (503
// "overloaded"): a store call missed its deadline while later ones were
// answered, i.e. this process, not the store, was out of time; on a
// CPU-starved 2-core runner that happens outside any fault. It is neither
// the store's answer nor the policy's, and is counted apart.
func (s sample) shed() bool {
	return s.err == nil && s.status == http.StatusServiceUnavailable && s.code == "overloaded" && s.retryAfter != ""
}

// policyAnswer reports whether the rule's failure mode decided the check.
func (s sample) policyAnswer() bool {
	if s.err != nil {
		return false
	}
	switch s.mode {
	case "closed":
		return s.status == http.StatusServiceUnavailable && s.code == "store_unavailable" && s.retryAfter != ""
	case "open":
		return s.status == http.StatusOK && s.degraded && s.allowed
	case "local":
		return (s.status == http.StatusOK || s.status == http.StatusTooManyRequests) && s.degraded
	}
	return false
}

func (s sample) String() string {
	if s.err != nil {
		return fmt.Sprintf("%s %s at %s: %v", s.mode, s.subject, s.sent.Format("15:04:05.000"), s.err)
	}
	return fmt.Sprintf("%s %s at %s: %d %s degraded=%v in %v", s.mode, s.subject, s.sent.Format("15:04:05.000"),
		s.status, s.code, s.degraded, s.latency().Round(time.Millisecond))
}

// check sends one check of subject on mode's rule.
func (r *faultRig) check(mode, subject string) sample {
	s := sample{mode: mode, subject: subject, sent: time.Now()}
	body := fmt.Sprintf(`{"route":"/%s/x","subject":%q}`, mode, subject)
	req, err := http.NewRequest("POST", r.in.url+"/v1/check", strings.NewReader(body))
	if err != nil {
		s.err = err
		return s
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	resp, err := r.client.Do(req)
	if err != nil {
		s.done, s.err = time.Now(), err
		return s
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s.done, s.status, s.retryAfter = time.Now(), resp.StatusCode, resp.Header.Get("Retry-After")
	if err != nil {
		s.err = err
		return s
	}
	var b struct {
		Allowed      bool  `json:"allowed"`
		Degraded     bool  `json:"degraded"`
		ResetAfterMS int64 `json:"reset_after_ms"`
		Error        struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		s.err = fmt.Errorf("status %d, body %q: %v", resp.StatusCode, raw, err)
		return s
	}
	s.allowed, s.degraded, s.code = b.Allowed, b.Degraded, b.Error.Code
	s.resetAfter = time.Duration(b.ResetAfterMS) * time.Millisecond
	return s
}

// load runs checks against every rule until stopped: fresh subjects (each
// checked once, so never denied by Redis nor by the deny cache) from
// freshWorkers goroutines per rule, and the subject "hot" every hotEvery.
type load struct {
	rig     *faultRig
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []sample
	seq     atomic.Int64
}

const (
	freshWorkers = 2
	freshPause   = 5 * time.Millisecond
	hotEvery     = 100 * time.Millisecond
)

func (r *faultRig) startLoad() *load {
	l := &load{rig: r, stop: make(chan struct{})}
	for _, mode := range faultModes {
		for range freshWorkers {
			l.wg.Go(func() {
				for l.running() {
					l.add(r.check(mode, fmt.Sprintf("u-%d", l.seq.Add(1))), false)
					time.Sleep(freshPause)
				}
			})
		}
		l.wg.Go(func() {
			for l.running() {
				l.add(r.check(mode, "hot"), true)
				time.Sleep(hotEvery)
			}
		})
	}
	return l
}

// every checks subject on mode's rule every period until the load stops.
func (l *load) every(mode, subject string, period time.Duration) {
	l.wg.Go(func() {
		for l.running() {
			l.add(l.rig.check(mode, subject), false)
			time.Sleep(period)
		}
	})
}

func (l *load) running() bool {
	select {
	case <-l.stop:
		return false
	default:
		return true
	}
}

func (l *load) add(s sample, hot bool) {
	s.hot = hot
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// snapshot returns the samples so far.
func (l *load) snapshot() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sample(nil), l.samples...)
}

// finish stops the load and returns every sample.
func (l *load) finish() []sample {
	close(l.stop)
	l.wg.Wait()
	return l.snapshot()
}

// awaitRecovery keeps the load running until every rule's fresh checks sent
// after `after` have been answered by Redis for a steady 500ms, or the
// recovery bound (plus that 500ms) has passed.
func (l *load) awaitRecovery(after time.Time) {
	deadline := after.Add(faultRecoveryBound + time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		steady := true
		for _, mode := range faultModes {
			at, ok := recoveredAt(l.snapshot(), mode, after)
			if !ok || time.Since(at) < 500*time.Millisecond {
				steady = false
			}
		}
		if steady {
			return
		}
	}
}

// exhaustHot checks the hot subject of every rule until Redis denies it,
// so the no-over-admission assertion sees the limit reached, not merely
// approached. The checks are samples like the others.
func (l *load) exhaustHot() {
	for _, mode := range faultModes {
		for range 2*faultLimit + 10 {
			s := l.rig.check(mode, "hot")
			l.add(s, true)
			if s.storeAnswer() && s.status == http.StatusTooManyRequests {
				break
			}
		}
	}
}

// recoveredAt returns when mode's fresh checks sent after `after` started to
// be answered by Redis for good: the sending time of the first of the
// unbroken run of store answers that ends the samples.
func recoveredAt(samples []sample, mode string, after time.Time) (time.Time, bool) {
	var at time.Time
	ok := false
	for _, s := range samples {
		if s.mode != mode || s.hot || s.sent.Before(after) {
			continue
		}
		switch {
		case s.shed(): // says nothing about the store
		case s.storeAnswer():
			if !ok {
				at, ok = s.sent, true
			}
		default:
			ok = false
		}
	}
	return at, ok
}

// fault is the time line of one fault, as seen by the test.
type fault struct {
	// start and end bound the interval in which the store certainly could
	// not answer: a fresh check sent and answered inside it must get its
	// rule's policy. Zero for a fault with no outage (SCRIPT FLUSH).
	start, end time.Time
	// healed is when the store was fully back; recovery is measured from it.
	healed time.Time
	// lifetimes splits the scenario at the start of a new Redis process
	// with no counters (zero: one lifetime).
	newLifetime time.Time
	// storeOnly says every answer of the scenario must be the store's.
	storeOnly bool
	// latencyBound, if set, replaces faultLatencyBound (for a scenario
	// run with a longer store deadline).
	latencyBound time.Duration
}

// verify asserts the four properties on the samples of one scenario and
// logs the figures.
func verify(t *testing.T, samples []sample, f fault) {
	t.Helper()
	bound := faultLatencyBound
	if f.latencyBound > 0 {
		bound = f.latencyBound
	}
	var maxLatency, maxPolicy time.Duration
	var slow, inFault, total int
	byMode := map[string]map[string]int{}
	for _, s := range samples {
		total++
		if s.err != nil {
			t.Errorf("check failed: %s", s)
			continue
		}
		if l := s.latency(); l > maxLatency {
			maxLatency = l
		}
		if s.latency() > bound {
			slow++
			if slow <= 5 {
				t.Errorf("answered in %v, over the %v bound: %s", s.latency().Round(time.Millisecond), bound, s)
			}
		}
		kind := "store"
		switch {
		case s.storeAnswer():
		case s.policyAnswer() && !f.storeOnly:
			kind = "policy"
		case s.shed():
			kind = "shed"
		default:
			t.Errorf("answer neither the store's nor the %s policy's: %s", s.mode, s)
			continue
		}
		if kind == "policy" {
			maxPolicy = max(maxPolicy, s.latency())
		}
		if byMode[s.mode] == nil {
			byMode[s.mode] = map[string]int{}
		}
		byMode[s.mode][kind]++
		if !s.hot && !f.start.IsZero() && !s.sent.Before(f.start) && !s.done.After(f.end) {
			inFault++
			if kind != "policy" {
				t.Errorf("a check inside the fault was not answered by the %s policy: %s", s.mode, s)
			}
		}
	}
	if slow > 0 {
		t.Errorf("%d of %d checks over the %v latency bound", slow, total, bound)
	}
	if !f.start.IsZero() && inFault == 0 {
		t.Errorf("no fresh check ran entirely inside the fault %s..%s", f.start.Format("15:04:05.000"), f.end.Format("15:04:05.000"))
	}
	t.Logf("%d checks, max latency %v (bound %v), of policy answers %v; %d fresh checks inside the fault; answers by rule: %v",
		total, maxLatency.Round(time.Millisecond), bound, maxPolicy.Round(time.Millisecond), inFault, byMode)

	// Recovery.
	if !f.healed.IsZero() {
		for _, mode := range faultModes {
			at, ok := recoveredAt(samples, mode, f.healed)
			if !ok {
				t.Errorf("%s: checks were not answered by Redis again after the fault (bound %v)", mode, faultRecoveryBound)
				continue
			}
			rec := max(at.Sub(f.healed), 0)
			if rec > faultRecoveryBound {
				t.Errorf("%s: answered by Redis again %v after the fault ended, over the %v bound", mode, rec.Round(time.Millisecond), faultRecoveryBound)
			}
			t.Logf("%s: recovery %v after the fault ended", mode, rec.Round(time.Millisecond))
		}
	}

	// No over-admission of the hot subject, per Redis lifetime and per
	// window: the rules' windows are hours aligned to the epoch, and a
	// scenario that runs across the top of the hour counts in two of them.
	type window struct {
		life int
		end  time.Time
	}
	for _, mode := range faultModes {
		admitted := map[window]int{}
		var perLife [2]int
		degraded := 0
		for _, s := range samples {
			if s.mode != mode || !s.hot || s.err != nil || !s.allowed {
				continue
			}
			if s.degraded {
				degraded++
				continue
			}
			life := 0
			if !f.newLifetime.IsZero() && !s.done.Before(f.newLifetime) {
				life = 1
			}
			// Redis decided between sent and done, far less than half a
			// window apart, so the nearest hour is the window's end.
			admitted[window{life, s.sent.Add(s.resetAfter).Round(faultWindow)}]++
			perLife[life]++
		}
		for w, n := range admitted {
			if n > faultLimit {
				t.Errorf("%s: hot subject admitted %d times by Redis lifetime %d in the window ending %s, limit %d",
					mode, n, w.life+1, w.end.Format("15:04"), faultLimit)
			}
		}
		if f.newLifetime.IsZero() {
			t.Logf("%s: hot subject admitted %d (limit %d) by Redis in %d window(s), %d degraded", mode, perLife[0], faultLimit, len(admitted), degraded)
		} else {
			t.Logf("%s: hot subject admitted %d + %d (limit %d per Redis lifetime) by Redis, %d degraded", mode, perLife[0], perLife[1], faultLimit, degraded)
		}
	}
}

// scenario gives a scenario its own deadline: every wait in it is bounded,
// and the scenario fails if together they took longer than
// faultScenarioBudget. It logs the run time.
func scenario(t *testing.T) {
	t.Helper()
	start := time.Now()
	t.Cleanup(func() {
		took := time.Since(start)
		t.Logf("scenario ran in %v", took.Round(time.Millisecond))
		if took > faultScenarioBudget {
			t.Errorf("scenario took %v, over its %v deadline", took.Round(time.Millisecond), faultScenarioBudget)
		}
	})
}
