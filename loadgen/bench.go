// Package loadgen is Sluice's load generator: it drives a target (the service's
// check API over HTTP, or a store in process) and measures what a user of a
// rate limiter cares about: how many checks per second, and how long each one
// takes, allowed and denied alike.
//
// Two load models:
//
//   - Open (Rate > 0): requests arrive at a fixed rate whatever the target
//     does, like independent clients. Latency is measured from the moment a
//     request was due, not from when a worker got round to sending it, so a
//     stalled target shows up as the queueing delay its clients would see
//     (no coordinated omission).
//   - Closed (Rate = 0): Concurrency workers send back to back, each waiting
//     for its answer: the most throughput the target gives that many callers.
//
// A deny (429, OVER_LIMIT) is an answer, not a failure: it is counted as
// denied, and its latency counts like any other. A request the service sheds
// under overload (503 "overloaded", RESOURCE_EXHAUSTED) is counted apart, with
// its own latencies, since a fast refusal is neither a decision nor a failure.
// Any other error is a failure. Subjects are drawn from Subjects distinct
// ones, with HotFraction of the requests going to one hot subject, so a run
// exercises both many keys and contention on one.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Outcome is what a target answered.
type Outcome int

const (
	Allowed Outcome = iota
	Denied
	// Shed is a request the service refused because it is overloaded: an
	// answer, but not a decision about the subject.
	Shed
)

// Target is what a run sends requests to. Do must be safe for concurrent use;
// an error is a failed request (not a deny, not a shed request).
type Target interface {
	Do(ctx context.Context, subject string) (Outcome, error)
}

// ResetTarget is a Target whose answers also say the decision's reset
// after (for a fixed window: the time until the window it counted in
// ends), so a run can count allowed requests by the window they named
// (Result.AllowedByWindow). resetAfter is negative when an answer did not
// say.
type ResetTarget interface {
	Target
	DoReset(ctx context.Context, subject string) (out Outcome, resetAfter time.Duration, err error)
}

// TargetFunc adapts a function to Target.
type TargetFunc func(ctx context.Context, subject string) (Outcome, error)

// Do calls f.
func (f TargetFunc) Do(ctx context.Context, subject string) (Outcome, error) { return f(ctx, subject) }

// Options configure a run.
type Options struct {
	// Rate is the open model's arrival rate per second; 0 selects the
	// closed model.
	Rate float64
	// Concurrency is the number of workers: the closed model's callers, or
	// the open model's senders (default 64).
	Concurrency int
	// Duration of the measured run (default 10s).
	Duration time.Duration
	// Subjects is the number of distinct subjects (default 10,000).
	Subjects int
	// HotFraction of the requests go to one hot subject (0 to 1).
	HotFraction float64
	// Timeout bounds each request (default 5s).
	Timeout time.Duration
	// MaxSamples bounds the latencies kept for percentiles (default
	// 5,000,000); past it, samples are kept by reservoir sampling.
	MaxSamples int
	// CPU, if set, reads the service's cumulative CPU seconds (such as its
	// process_cpu_seconds_total). Run reads it just before the first
	// request and just after the last answer, and reports the difference.
	CPU func(ctx context.Context) (float64, error)
}

func (o *Options) validate() error {
	if o.Concurrency == 0 {
		o.Concurrency = 64
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Subjects == 0 {
		o.Subjects = 10_000
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.MaxSamples == 0 {
		o.MaxSamples = 5_000_000
	}
	switch {
	case o.Rate < 0:
		return fmt.Errorf("rate must be positive (open model) or 0 (closed model), got %v", o.Rate)
	case o.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", o.Concurrency)
	case o.Duration < 0:
		return fmt.Errorf("duration must be positive, got %v", o.Duration)
	case o.Subjects < 1:
		return fmt.Errorf("subjects must be at least 1, got %d", o.Subjects)
	case o.HotFraction < 0 || o.HotFraction > 1:
		return fmt.Errorf("hot fraction must be between 0 and 1, got %v", o.HotFraction)
	case o.Timeout < 0:
		return fmt.Errorf("timeout must be positive, got %v", o.Timeout)
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Model   string // "open" or "closed"
	Elapsed time.Duration
	Sent    int64
	Allowed int64
	Denied  int64
	// Shed counts requests the service refused as overloaded.
	Shed int64
	// Errors counts failed requests: neither an answer nor shed.
	Errors int64
	// Late counts open-model requests that waited for a free worker; their
	// wait is part of their latency.
	Late int64
	// Dropped counts open-model requests that were due during the run but
	// still queued Timeout after it ended: the target fell that far behind.
	// (Requests still queued at the end are sent if they can be within
	// Timeout, so one due just before the end is not a drop; Elapsed then
	// includes that drain.)
	Dropped int64
	// FirstError is the first error seen, to say why requests failed.
	FirstError error
	// CPUSeconds is how much CPU the service used during the run, when
	// Options.CPU was set and both readings succeeded (CPUMeasured); else
	// CPUError says why not.
	CPUSeconds  float64
	CPUMeasured bool
	CPUError    error
	// AllowedBySecond counts allowed requests by the wall-clock second
	// (Unix) they were sent in and the one their answer came in, sorted:
	// the decision fell between the two, so a per-window count of a
	// fixed window (aligned to Unix seconds) is exact for the requests
	// that did not cross a boundary and bounded for those that did.
	AllowedBySecond []SecondCount
	// AllowedByWindow counts allowed requests by the end of the window
	// their decision named, in Unix seconds, sorted, when the target is a
	// ResetTarget: the decision was made between the request's send and
	// answer times (t_s, t_a), so the end of its window is the whole
	// second in [t_s + reset after, t_a + reset after] (widened by a
	// millisecond each side for the answer's rounding). That is exact
	// whatever crossed a boundary in flight, for windows aligned to Unix
	// seconds. Unplaced counts the allowed requests with no such second,
	// or more than one (a round trip of a second or more), or no reset
	// after at all: they are in no window's count.
	AllowedByWindow []WindowCount
	Unplaced        int64
	// Mismatched counts the allowed requests sent and answered in one Unix
	// second whose decision named the end of another window than that
	// second's: for windows of 1 s aligned to Unix seconds, a check of the
	// count against the clock, which should find none.
	Mismatched  int64
	latencies   []time.Duration
	shedLatency []time.Duration
}

// SecondCount is how many allowed requests were sent in Unix second Sent
// and answered in Unix second Answered.
type SecondCount struct {
	Sent     int64 `json:"sent"`
	Answered int64 `json:"answered"`
	Allowed  int64 `json:"allowed"`
}

// WindowCount is how many allowed requests named the window that ends at
// Unix second End.
type WindowCount struct {
	End     int64 `json:"end"`
	Allowed int64 `json:"allowed"`
}

// windowEnd is the whole Unix second in [sent+resetAfter-1ms,
// answered+resetAfter+1ms], or false when there is none or more than one.
func windowEnd(sent, answered time.Time, resetAfter time.Duration) (int64, bool) {
	if resetAfter < 0 {
		return 0, false
	}
	lo := sent.Add(resetAfter - time.Millisecond).UnixNano()
	hi := answered.Add(resetAfter + time.Millisecond).UnixNano()
	const s = int64(time.Second)
	first := lo / s // ceil(lo/s) for positive lo
	if first*s < lo {
		first++
	}
	if last := hi / s; first != last {
		return 0, false
	}
	return first, true
}

// Answered is the number of requests the service decided: allowed or denied.
func (r Result) Answered() int64 { return r.Allowed + r.Denied }

// CPUPerAnswer is the service's CPU time per answered request, shed and
// failed ones excluded: whatever they cost is charged to the answered ones,
// which is what the service spent per useful answer. It is 0 when CPU was
// not measured or nothing was answered.
func (r Result) CPUPerAnswer() time.Duration {
	if !r.CPUMeasured || r.Answered() == 0 {
		return 0
	}
	return time.Duration(r.CPUSeconds / float64(r.Answered()) * float64(time.Second))
}

// Throughput is answered requests (allowed or denied) per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Allowed+r.Denied) / r.Elapsed.Seconds()
}

// Percentile returns the q-quantile (0 to 1) of the latencies of answered
// requests.
func (r Result) Percentile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.latencies)-1))
	return r.latencies[i]
}

// Max is the largest latency seen (among the samples kept).
func (r Result) Max() time.Duration { return r.Percentile(1) }

// ShedPercentile returns the q-quantile (0 to 1) of the latencies of shed
// requests: how fast the service says no when overloaded.
func (r Result) ShedPercentile(q float64) time.Duration {
	if len(r.shedLatency) == 0 {
		return 0
	}
	return r.shedLatency[int(q*float64(len(r.shedLatency)-1))]
}

// subjects hands out subject names.
type subjects struct {
	names []string
	hot   float64
}

func newSubjects(n int, hot float64) *subjects {
	s := &subjects{names: make([]string, n), hot: hot}
	for i := range s.names {
		s.names[i] = "subject-" + strconv.Itoa(i)
	}
	return s
}

func (s *subjects) pick(r *rand.Rand) string {
	if s.hot > 0 && r.Float64() < s.hot {
		return "hot"
	}
	return s.names[r.IntN(len(s.names))]
}

// reservoir keeps at most max latencies, a uniform sample of all it saw.
type reservoir struct {
	samples []time.Duration
	seen    int64
	max     int
}

func (s *reservoir) add(rng *rand.Rand, latency time.Duration) {
	s.seen++
	if len(s.samples) < s.max {
		s.samples = append(s.samples, latency)
	} else if j := rng.Int64N(s.seen); j < int64(s.max) {
		s.samples[j] = latency
	}
}

// recorder collects outcomes from many workers.
type recorder struct {
	allowed, denied, shed, errors, late, dropped atomic.Int64
	firstErr                                     atomic.Pointer[error]

	mu       sync.Mutex
	bySecond map[[2]int64]int64 // allowed by (sent, answered) Unix second
	byWindow map[int64]int64    // allowed by the window end they named
	unplaced int64
	mismatch int64
	answered reservoir
	shedLat  reservoir
	rng      *rand.Rand
}

func (rec *recorder) record(out Outcome, err error, latency time.Duration, sent, answered time.Time, resetAfter time.Duration) {
	if err != nil {
		rec.errors.Add(1)
		rec.firstErr.CompareAndSwap(nil, &err)
		return
	}
	samples := &rec.answered
	switch out {
	case Denied:
		rec.denied.Add(1)
	case Shed:
		rec.shed.Add(1)
		samples = &rec.shedLat
	default:
		rec.allowed.Add(1)
	}
	rec.mu.Lock()
	samples.add(rec.rng, latency)
	if out == Allowed {
		rec.bySecond[[2]int64{sent.Unix(), answered.Unix()}]++
		if rec.byWindow != nil {
			if end, ok := windowEnd(sent, answered, resetAfter); ok {
				rec.byWindow[end]++
				if s := sent.Unix(); s == answered.Unix() && end != s+1 {
					rec.mismatch++
				}
			} else {
				rec.unplaced++
			}
		}
	}
	rec.mu.Unlock()
}

// Run drives target with opts until opts.Duration has passed or ctx ends,
// and returns what it measured.
func Run(ctx context.Context, target Target, opts Options) (Result, error) {
	if target == nil {
		return Result{}, errors.New("bench: no target")
	}
	if err := opts.validate(); err != nil {
		return Result{}, err
	}
	rec := &recorder{
		answered: reservoir{max: opts.MaxSamples},
		shedLat:  reservoir{max: opts.MaxSamples},
		bySecond: map[[2]int64]int64{},
		rng:      rand.New(rand.NewPCG(1, 2)),
	}
	do := func(ctx context.Context, subject string) (Outcome, time.Duration, error) {
		out, err := target.Do(ctx, subject)
		return out, -1, err
	}
	if rt, ok := target.(ResetTarget); ok {
		rec.byWindow = map[int64]int64{}
		do = rt.DoReset
	}
	subj := newSubjects(opts.Subjects, opts.HotFraction)
	res := Result{Model: "closed"}
	// The CPU window encloses the load window and little else: the readings
	// are taken right next to it, outside the run's own deadline.
	var cpuBefore float64
	if opts.CPU != nil {
		cpuBefore, res.CPUError = opts.CPU(ctx)
	}
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()

	send := func(r *rand.Rand, due time.Time) {
		reqCtx, cancelReq := context.WithTimeout(context.WithoutCancel(ctx), opts.Timeout)
		sent := time.Now()
		out, resetAfter, err := do(reqCtx, subj.pick(r))
		cancelReq()
		answered := time.Now()
		rec.record(out, err, answered.Sub(due), sent, answered, resetAfter)
	}

	start := time.Now()
	var wg sync.WaitGroup
	if opts.Rate == 0 {
		for w := 0; w < opts.Concurrency; w++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 7))
				for ctx.Err() == nil {
					send(r, time.Now())
				}
			}(uint64(w))
		}
	} else {
		res.Model = "open"
		// Due times go to the workers through a queue; a request that finds
		// every worker busy waits there, and the wait is in its latency.
		queue := make(chan time.Time, 1<<16)
		// Requests due in the window but still queued at its end are sent
		// until drainEnd: one due just before the end is no drop.
		drainEnd := start.Add(opts.Duration + opts.Timeout)
		for w := 0; w < opts.Concurrency; w++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 7))
				for due := range queue {
					if runCtx.Err() != nil || time.Now().After(drainEnd) {
						rec.dropped.Add(1)
						continue
					}
					if time.Since(due) > time.Millisecond {
						rec.late.Add(1)
					}
					send(r, due)
				}
			}(uint64(w))
		}
		interval := time.Duration(float64(time.Second) / opts.Rate)
		next := start
		// Exactly the requests due in [start, end) are enqueued, however
		// late this goroutine runs: a starved scheduler catches up rather
		// than sending less, and the run's deadline never cuts the last
		// ones off. Only a cancelled parent context stops it early.
		end := start.Add(opts.Duration)
	schedule:
		for next.Before(end) {
			for !next.After(time.Now()) && next.Before(end) {
				select {
				case queue <- next:
				default:
					// The queue itself is full: the target is hopelessly
					// behind; count the request as failed rather than
					// silently sending less load.
					rec.record(0, errors.New("bench: request queue full, the target cannot keep up with the rate"), 0, time.Time{}, time.Time{}, -1)
				}
				next = next.Add(interval)
			}
			if !next.Before(end) {
				break
			}
			select {
			case <-runCtx.Done():
				break schedule
			case <-time.After(time.Until(next)):
			}
		}
		close(queue)
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if opts.CPU != nil && res.CPUError == nil {
		cpuAfter, err := opts.CPU(context.WithoutCancel(runCtx))
		switch {
		case err != nil:
			res.CPUError = err
		case cpuAfter < cpuBefore:
			// A counter that went down: the service restarted mid-run.
			res.CPUError = fmt.Errorf("the CPU counter went down from %v to %v s: the service restarted during the run", cpuBefore, cpuAfter)
		default:
			res.CPUSeconds, res.CPUMeasured = cpuAfter-cpuBefore, true
		}
	}
	res.Allowed, res.Denied, res.Shed, res.Errors = rec.allowed.Load(), rec.denied.Load(), rec.shed.Load(), rec.errors.Load()
	res.Late, res.Dropped = rec.late.Load(), rec.dropped.Load()
	res.Sent = res.Allowed + res.Denied + res.Shed + res.Errors
	if e := rec.firstErr.Load(); e != nil {
		res.FirstError = *e
	}
	for k, n := range rec.bySecond {
		res.AllowedBySecond = append(res.AllowedBySecond, SecondCount{Sent: k[0], Answered: k[1], Allowed: n})
	}
	slices.SortFunc(res.AllowedBySecond, func(a, b SecondCount) int {
		if a.Sent != b.Sent {
			return int(a.Sent - b.Sent)
		}
		return int(a.Answered - b.Answered)
	})
	if rec.byWindow != nil {
		res.AllowedByWindow = []WindowCount{} // counted, if empty
	}
	for end, n := range rec.byWindow {
		res.AllowedByWindow = append(res.AllowedByWindow, WindowCount{End: end, Allowed: n})
	}
	slices.SortFunc(res.AllowedByWindow, func(a, b WindowCount) int { return int(a.End - b.End) })
	res.Unplaced, res.Mismatched = rec.unplaced, rec.mismatch
	res.latencies, res.shedLatency = rec.answered.samples, rec.shedLat.samples
	slices.Sort(res.latencies)
	slices.Sort(res.shedLatency)
	return res, nil
}
