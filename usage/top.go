package usage

import (
	"hash/maphash"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Top subjects. Each rule keeps, for the hour under way, the heaviest
// subjects by denials and by units in bounded memory: Space-Saving
// (Metwally, Agrawal, El Abbadi, 2005) over topSlots subjects, in topShards
// shards picked at random like the counters, so two cores seldom take one
// lock. A subject's count in a shard is at most its Err above the truth, and
// any subject with more than 1/topSlots of a shard's total is in it; the
// shards' counts add up at the roll.
//
// The hour's lists are this instance's cumulative figures, written at each
// flush in place of the ones written before (TopRow), so a store keeps one
// set per instance and hour and sums them across instances.

const (
	// TopN is how many subjects a rule's hour keeps per ranking.
	TopN      = 20
	topSlots  = 32 // per shard: room above TopN for subjects on their way up
	topShards = 4
)

// TopRow is one subject among the heaviest of one rule and hour at one
// instance: its denials and the units it spent, so far in the hour.
type TopRow struct {
	Namespace, Rule string
	Hour            time.Time // the hour's start, UTC
	Subject         string
	Denied, Units   int64
}

var topSeed = maphash.MakeSeed()

type topSlot struct {
	hash    uint64
	subject string
	count   int64
	err     int64
}

// spaceSaving holds at most topSlots subjects; it never allocates.
type spaceSaving struct {
	slots [topSlots]topSlot
	n     int
}

func (s *spaceSaving) add(h uint64, subject string, n int64) {
	for i := range s.slots[:s.n] {
		if sl := &s.slots[i]; sl.hash == h && sl.subject == subject {
			sl.count += n
			return
		}
	}
	if s.n < topSlots {
		s.slots[s.n] = topSlot{hash: h, subject: subject, count: n}
		s.n++
		return
	}
	// Replace the smallest; it hands its count on as the newcomer's error.
	low := 0
	for i := 1; i < topSlots; i++ {
		if s.slots[i].count < s.slots[low].count {
			low = i
		}
	}
	c := s.slots[low].count
	s.slots[low] = topSlot{hash: h, subject: subject, count: c + n, err: c}
}

type topShard struct {
	mu     sync.Mutex
	closed bool // rolled: adders move to the next sketch
	denied spaceSaving
	units  spaceSaving
	_      [64]byte // own cache lines
}

// topSketch is one rule's hour.
type topSketch struct{ shards [topShards]topShard }

// Subject counts one decided check of subject: a denial (denied), or units
// spent by an allowed check. It takes one shard's lock and does not
// allocate, but for one sketch per rule and hour. A nil *Counters counts
// nothing.
func (c *Counters) Subject(subject string, denied bool, units int64) {
	if c == nil || (!denied && units <= 0) {
		return
	}
	h := maphash.String(topSeed, subject)
	for {
		sk := c.top.Load()
		if sk == nil {
			sk = new(topSketch)
			if !c.top.CompareAndSwap(nil, sk) {
				continue
			}
		}
		sh := &sk.shards[rand.Uint32()%topShards]
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			continue // rolled meanwhile: count in the next hour's
		}
		if denied {
			sh.denied.add(h, subject, 1)
		} else {
			sh.units.add(h, subject, units)
		}
		sh.mu.Unlock()
		return
	}
}

// topOf returns a sketch's heaviest subjects: the union of the TopN by
// denials and the TopN by units, with both figures of each. closeIt ends
// the sketch (the hour is over).
func topOf(sk *topSketch, closeIt bool) map[string]*[2]int64 {
	sums := make(map[string]*[2]int64)
	for i := range sk.shards {
		sh := &sk.shards[i]
		sh.mu.Lock()
		sh.closed = sh.closed || closeIt
		for k, s := range []*spaceSaving{&sh.denied, &sh.units} {
			for _, sl := range s.slots[:s.n] {
				v := sums[sl.subject]
				if v == nil {
					v = new([2]int64)
					sums[sl.subject] = v
				}
				v[k] += sl.count
			}
		}
		sh.mu.Unlock()
	}
	keep := make(map[string]*[2]int64)
	for k := range 2 {
		subjects := make([]string, 0, len(sums))
		for s, v := range sums {
			if v[k] > 0 {
				subjects = append(subjects, s)
			}
		}
		sort.Slice(subjects, func(i, j int) bool {
			a, b := sums[subjects[i]][k], sums[subjects[j]][k]
			return a > b || a == b && subjects[i] < subjects[j]
		})
		for _, s := range subjects[:min(TopN, len(subjects))] {
			keep[s] = sums[s]
		}
	}
	return keep
}

// rollTop turns every rule's hour so far into pending top rows (replacing
// those pending for that hour), and starts a new hour once minute, the last
// of its hour, is complete. r.mu is held.
func (r *Recorder) rollTop(minute time.Time, complete bool) {
	hour := minute.Truncate(time.Hour)
	last := complete && minute.Add(time.Minute).Truncate(time.Hour) != hour
	for k, e := range r.rules {
		sk := e.c.top.Load()
		if sk == nil {
			continue
		}
		if last {
			e.c.top.CompareAndSwap(sk, nil)
		}
		var rows []TopRow
		for subject, v := range topOf(sk, last) {
			rows = append(rows, TopRow{Namespace: k.namespace, Rule: k.rule, Hour: hour, Subject: subject, Denied: v[0], Units: v[1]})
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].Subject < rows[j].Subject })
		r.pendingTop[topKey{k, hour}] = rows
	}
	// Bound what waits through an outage as the rows are bounded: drop
	// the oldest hours first.
	for len(r.pendingTop) > 0 && r.topRows() > r.opts.MaxRows {
		var oldest topKey
		for k := range r.pendingTop {
			if oldest.hour.IsZero() || k.hour.Before(oldest.hour) {
				oldest = k
			}
		}
		r.dropped.Add(int64(len(r.pendingTop[oldest])))
		delete(r.pendingTop, oldest)
	}
}

type topKey struct {
	rule ruleKey
	hour time.Time
}

func (a topKey) less(b topKey) bool {
	if !a.hour.Equal(b.hour) {
		return a.hour.Before(b.hour)
	}
	if a.rule.namespace != b.rule.namespace {
		return a.rule.namespace < b.rule.namespace
	}
	return a.rule.rule < b.rule.rule
}

func (r *Recorder) topRows() int {
	n := 0
	for _, rows := range r.pendingTop {
		n += len(rows)
	}
	return n
}
