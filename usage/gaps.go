package usage

import (
	"sort"
	"time"
)

// Gaps. Rows dropped while the database could not be written are history
// lost; so that a chart shows a gap there rather than a quiet minute, the
// Recorder remembers which minutes of which rule it dropped and writes them
// with the next batch that lands.

// Gap is a range of minutes [From, To) of one rule whose counts from one
// instance were dropped: the stored sums there are short.
type Gap struct {
	Namespace, Rule string
	From, To        time.Time
}

// maxGaps bounds the ranges a Recorder remembers; past it the oldest merge
// into one (a wider gap than the truth, never a narrower one).
const maxGaps = 10_000

// noteDropped records rows as dropped. r.mu is held.
func (r *Recorder) noteDropped(rows []Row) {
	for _, row := range rows {
		k := ruleKey{row.Namespace, row.Rule}
		from, to := row.Start, row.Start.Add(time.Minute)
		gaps := r.gaps[k]
		if n := len(gaps); n > 0 && !from.After(gaps[n-1].To) && !to.Before(gaps[n-1].From) {
			last := &gaps[n-1]
			if from.Before(last.From) {
				last.From = from
			}
			if to.After(last.To) {
				last.To = to
			}
			continue
		}
		r.gaps[k] = append(gaps, Gap{Namespace: row.Namespace, Rule: row.Rule, From: from, To: to})
		r.gapCount++
	}
	for r.gapCount > maxGaps {
		// Merge the two oldest ranges of the rule with the most.
		var most ruleKey
		for k, g := range r.gaps {
			if len(g) > len(r.gaps[most]) {
				most = k
			}
		}
		g := r.gaps[most]
		g[1].From = g[0].From
		r.gaps[most] = g[1:]
		r.gapCount--
	}
}

// takeGaps returns the remembered gaps, oldest first, and forgets them.
// r.mu is held.
func (r *Recorder) takeGaps() []Gap {
	var out []Gap
	for _, g := range r.gaps {
		out = append(out, g...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	r.gaps, r.gapCount = make(map[ruleKey][]Gap), 0
	return out
}
