// Package usage keeps per-minute rollups of the check engine's decisions
// per (namespace, rule) and hands them to a database in batches.
//
// The check path only bumps Counters: atomic adds on one of several
// cache-line-padded shards picked at random, so cores rarely share a line
// and nothing allocates. A Recorder turns the counters into Rows once a
// minute (the delta since the last roll) and a Writer stores them, one
// batch per flush. Rows wait in a bounded buffer while the Writer fails:
// the oldest are dropped and counted, so a database outage never slows a
// check and costs only memory up to the bound.
package usage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is one counted quantity of a rule's minute.
type Kind int

// The kinds counted per (namespace, rule, minute).
const (
	Allowed Kind = iota
	Denied
	ShadowDenied
	Degraded
	Shed
	Units // cost spent by allowed checks
	numKinds
)

// shards spreads a rule's counters over several cache lines: enough that
// concurrent checks of one rule on different cores seldom meet.
const shards = 16

type shard struct {
	n [numKinds]atomic.Int64
	_ [64 - (int(numKinds)*8)%64]byte // own cache line
}

// Counters count one rule's decisions. A nil *Counters counts nothing, so
// an engine without usage pays one nil check.
type Counters struct {
	shards [shards]shard
	top    atomic.Pointer[topSketch] // the hour under way; nil until a subject is counted
}

// Add adds n to kind. It is safe for concurrent use and does not allocate.
func (c *Counters) Add(kind Kind, n int64) {
	if c == nil || n == 0 {
		return
	}
	// rand.Uint32 reads the runtime's per-thread generator: no shared state.
	c.shards[rand.Uint32()%shards].n[kind].Add(n)
}

func (c *Counters) sum() (out [numKinds]int64) {
	for i := range c.shards {
		for k := range out {
			out[k] += c.shards[i].n[k].Load()
		}
	}
	return out
}

// Row is the counts of one (namespace, rule) over one period: a minute
// when written, the query's step when read.
type Row struct {
	Namespace, Rule string
	// Start is when the period starts, UTC.
	Start                                                time.Time
	Allowed, Denied, ShadowDenied, Degraded, Shed, Units int64
}

func (r *Row) set(v [numKinds]int64) {
	r.Allowed, r.Denied, r.ShadowDenied = v[Allowed], v[Denied], v[ShadowDenied]
	r.Degraded, r.Shed, r.Units = v[Degraded], v[Shed], v[Units]
}

// Batch is what one flush writes.
type Batch struct {
	// Rows are added to what is stored: several instances write the same
	// minutes.
	Rows []Row
	// Instance names the Recorder that wrote Top.
	Instance string
	// Top replaces Instance's top subjects of each (namespace, rule, hour)
	// it holds: they are that instance's figures so far in the hour.
	Top []TopRow
	// Gaps are minutes whose counts Instance dropped.
	Gaps []Gap
}

// Writer stores a batch in one transaction.
type Writer interface {
	WriteUsage(ctx context.Context, b Batch) error
}

// DefaultMaxRows bounds the rows waiting for the Writer: a day of minutes
// of ~70 rules.
const DefaultMaxRows = 100_000

// Options configure a Recorder.
type Options struct {
	// MaxRows bounds the rows waiting for the Writer (default
	// DefaultMaxRows); past it the oldest are dropped and counted.
	MaxRows int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Dropped, if set, is told of every row dropped (a metric).
	Dropped func(n int)
}

type ruleKey struct{ namespace, rule string }

type entry struct {
	c    *Counters
	last [numKinds]int64 // sum at the last roll
}

// Recorder owns the Counters of every rule and their pending rows. It is
// safe for concurrent use.
type Recorder struct {
	opts     Options
	instance string
	mu       sync.Mutex
	rules    map[ruleKey]*entry
	pending  []Row
	// pendingTop holds the latest top subjects of each rule and hour not
	// yet written.
	pendingTop map[topKey][]TopRow
	// gaps are the minutes dropped, per rule, not yet written.
	gaps     map[ruleKey][]Gap
	gapCount int
	dropped  atomic.Int64
}

// NewRecorder returns a Recorder.
func NewRecorder(opts Options) *Recorder {
	if opts.MaxRows <= 0 {
		opts.MaxRows = DefaultMaxRows
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Recorder{opts: opts, rules: make(map[ruleKey]*entry), pendingTop: make(map[topKey][]TopRow), gaps: make(map[ruleKey][]Gap),
		instance: fmt.Sprintf("%016x", rand.Uint64())}
}

// Counters returns the Counters of (namespace, rule), the same ones for as
// long as the Recorder lives, so a rule re-made on a catalog change goes on
// counting where it was. A nil Recorder returns nil.
func (r *Recorder) Counters(namespace, rule string) *Counters {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := ruleKey{namespace, rule}
	e, ok := r.rules[k]
	if !ok {
		e = &entry{c: new(Counters)}
		r.rules[k] = e
	}
	return e.c
}

// Roll turns what was counted since the last roll into rows of minute
// (truncated to the minute) waiting for the next Flush. minute is over: if
// it is the last of its hour, the hour's top subjects are final.
func (r *Recorder) Roll(minute time.Time) { r.roll(minute, true) }

// roll is Roll of a minute over (complete) or still under way.
func (r *Recorder) roll(minute time.Time, complete bool) {
	minute = minute.UTC().Truncate(time.Minute)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.rules {
		now := e.c.sum()
		var delta [numKinds]int64
		zero := true
		for i := range now {
			delta[i] = now[i] - e.last[i]
			zero = zero && delta[i] == 0
		}
		e.last = now
		if zero {
			continue
		}
		row := Row{Namespace: k.namespace, Rule: k.rule, Start: minute}
		row.set(delta)
		r.pending = append(r.pending, row)
	}
	r.trim()
	r.rollTop(minute, complete)
}

// trim drops the oldest pending rows past the bound. r.mu is held.
func (r *Recorder) trim() {
	over := len(r.pending) - r.opts.MaxRows
	if over <= 0 {
		return
	}
	r.noteDropped(r.pending[:over])
	r.pending = append(r.pending[:0], r.pending[over:]...)
	r.dropped.Add(int64(over))
	if r.opts.Dropped != nil {
		r.opts.Dropped(over)
	}
}

// Pending returns the number of rows waiting for the Writer, top
// subjects' included.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) + r.topRows()
}

// Dropped returns the number of rows dropped since the Recorder was made.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Flush writes the pending rows and top subjects in one batch. On failure
// they stay pending (within the bound) for the next Flush.
func (r *Recorder) Flush(ctx context.Context, w Writer) error {
	r.mu.Lock()
	batch := Batch{Rows: r.pending, Instance: r.instance, Gaps: r.takeGaps()}
	top := r.pendingTop
	r.pending, r.pendingTop = nil, make(map[topKey][]TopRow)
	r.mu.Unlock()
	keys := make([]topKey, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	for _, k := range keys {
		batch.Top = append(batch.Top, top[k]...)
	}
	if len(batch.Rows) == 0 && len(batch.Top) == 0 && len(batch.Gaps) == 0 {
		return nil
	}
	err := w.WriteUsage(ctx, batch)
	if err == nil {
		return nil
	}
	r.mu.Lock()
	// Older first, so trim drops the oldest.
	r.pending = append(batch.Rows, r.pending...)
	r.trim()
	for k, rows := range top {
		if _, newer := r.pendingTop[k]; !newer {
			r.pendingTop[k] = rows
		}
	}
	for _, g := range batch.Gaps {
		r.gaps[ruleKey{g.Namespace, g.Rule}] = append(r.gaps[ruleKey{g.Namespace, g.Rule}], g)
		r.gapCount++
	}
	r.mu.Unlock()
	return fmt.Errorf("usage: store %d rollup rows and %d top subjects: %w", len(batch.Rows), len(batch.Top), err)
}

// Run rolls at every minute boundary and flushes every interval until ctx
// ends, then flushes once more (with a short deadline of its own). Each
// flush first rolls the minute under way so far, so a decision is stored
// within one interval; its later counts are added to the same minute.
// Failed flushes are reported to report (nil: ignored) and retried at the
// next.
func (r *Recorder) Run(ctx context.Context, w Writer, interval time.Duration, report func(error)) error {
	if interval <= 0 {
		return errors.New("usage: the flush interval must be positive")
	}
	if report == nil {
		report = func(error) {}
	}
	flush := time.NewTicker(interval)
	defer flush.Stop()
	// open is the minute the counts accumulate in: what was counted since
	// the last roll belongs to it until a roll at or after its end.
	open := r.opts.Now().UTC().Truncate(time.Minute)
	closeEnded := func() {
		if now := r.opts.Now().UTC().Truncate(time.Minute); now.After(open) {
			r.Roll(open)
			open = now
		}
	}
	flushNow := func(ctx context.Context) {
		closeEnded()
		r.roll(open, false)
		if err := r.Flush(ctx, w); err != nil {
			report(err)
		}
	}
	for {
		roll := time.NewTimer(open.Add(time.Minute).Sub(r.opts.Now()))
		select {
		case <-ctx.Done():
			roll.Stop()
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flushNow(fctx)
			cancel()
			return nil
		case <-roll.C:
			closeEnded()
		case <-flush.C:
			roll.Stop()
			flushNow(ctx)
		}
	}
}
