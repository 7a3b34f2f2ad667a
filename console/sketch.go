package console

import "sort"

// topK keeps the heaviest hitters of a stream in bounded memory: the
// Space-Saving algorithm (Metwally, Agrawal, El Abbadi, 2005). It holds at
// most k subjects; a new subject when full takes the place of the one with
// the smallest count and inherits that count as its possible overcount. Any
// subject seen more than n/k times (n: all denies counted) is in the table,
// and each count is at most Err above the true one.
type topK struct {
	k      int
	counts map[string]*hitter
}

type hitter struct {
	Subject string
	Count   uint64
	// Err bounds how much of Count may belong to subjects it replaced.
	Err uint64
}

func newTopK(k int) *topK { return &topK{k: k, counts: make(map[string]*hitter, k)} }

// add counts one occurrence of subject.
func (t *topK) add(subject string) {
	if h, ok := t.counts[subject]; ok {
		h.Count++
		return
	}
	if len(t.counts) < t.k {
		t.counts[subject] = &hitter{Subject: subject, Count: 1}
		return
	}
	// Evict the smallest: k is small, so a scan costs less than keeping
	// a heap in order on every increment.
	var min *hitter
	for _, h := range t.counts {
		if min == nil || h.Count < min.Count || h.Count == min.Count && h.Subject < min.Subject {
			min = h
		}
	}
	delete(t.counts, min.Subject)
	t.counts[subject] = &hitter{Subject: subject, Count: min.Count + 1, Err: min.Count}
}

// top returns up to n hitters, the heaviest first.
func (t *topK) top(n int) []hitter {
	out := make([]hitter, 0, len(t.counts))
	for _, h := range t.counts {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Subject < out[j].Subject
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
