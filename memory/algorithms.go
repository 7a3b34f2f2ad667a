package memory

import "github.com/sluicelabs/sluice"

// The arithmetic below is the same, step for step, as the Lua in package
// redis, so both stores reach identical decisions. Every value stays an
// integer below 2^53, which Lua's doubles hold exactly.

// state is one limit's counter. For a token bucket: a = tokens in units of
// 1/interval, b = last refill (ms), c = the interval those units refer to. For
// the windows: a = window index, b = count in it, c = count in the previous
// window (sliding only).
type state struct {
	a, b, c  int64
	expireAt int64 // ms; the state is worthless after this
}

// outcome is one limit's decision before anything is written.
type outcome struct {
	allowed                bool
	remaining              int64
	resetAfter, retryAfter int64 // ms
	next                   state // the state to write if the check is allowed
	write                  bool  // whether next must be written if allowed
	// extend: next must be written even on a deny, because it outlives the
	// stored state. That happens when a token bucket's capacity was raised or
	// its rate lowered: the stored expiry assumed the old figures, and
	// letting the state expire then would refill the bucket before the
	// retry_after this decision reports.
	extend bool
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// decide applies cost to one limit at time now (ms). st is nil when no state
// exists.
func decide(l sluice.Limit, st *state, now, cost int64) outcome {
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket:
		return tokenBucket(l, st, now, cost)
	case sluice.AlgorithmSlidingWindow:
		return slidingWindow(l, st, now, cost)
	default:
		return fixedWindow(l, st, now, cost)
	}
}

func tokenBucket(l sluice.Limit, st *state, now, cost int64) outcome {
	n, p := l.RefillRate()
	full := l.Capacity * p
	tokens, last := full, now
	if st != nil {
		tokens, last = st.a, st.b
		if st.c != p {
			// The rate changed: carry over whole tokens only.
			tokens = (tokens / st.c) * p
		}
		if now > last {
			if now-last >= ceilDiv(full-min(tokens, full), n) {
				tokens = full
			} else {
				tokens += (now - last) * n
			}
			last = now
		}
		tokens = min(tokens, full)
	}
	var o outcome
	need := cost * p
	if tokens >= need {
		o.allowed = true
		tokens -= need
		if cost > 0 {
			o.write = true
		}
	} else {
		o.retryAfter = ceilDiv(need-tokens, n)
	}
	o.remaining = tokens / p
	o.resetAfter = ceilDiv(full-tokens, n)
	o.next = state{a: tokens, b: last, c: p, expireAt: now + o.resetAfter}
	o.extend = st != nil && o.next.expireAt > st.expireAt
	return o
}

func slidingWindow(l sluice.Limit, st *state, now, cost int64) outcome {
	w, limit := l.Window.Milliseconds(), l.Capacity
	idx := now / w
	var curr, prev int64
	if st != nil {
		switch st.a {
		case idx:
			curr, prev = st.b, st.c
		case idx - 1:
			prev = st.b
		}
	}
	elapsed := now - idx*w
	var o outcome
	// Weighted usage times w: the previous window counts for the part of it
	// the rolling window still covers.
	if prev*(w-elapsed)+(curr+cost)*w <= limit*w {
		o.allowed = true
		curr += cost
		if cost > 0 {
			o.write = true
		}
	} else if curr+cost <= limit {
		// Fits in this window once enough of the previous one has slid out.
		o.retryAfter = max(1, w-elapsed-(limit-curr-cost)*w/prev)
	} else {
		// Must wait for the next window, where this window's count becomes
		// the previous one and slides out as time passes.
		o.retryAfter = w - elapsed + max(0, w-(limit-cost)*w/curr)
	}
	o.remaining = max(0, (limit*w-prev*(w-elapsed)-curr*w)/w)
	switch {
	case curr > 0:
		o.resetAfter = 2*w - elapsed
	case prev > 0:
		o.resetAfter = w - elapsed
	}
	o.next = state{a: idx, b: curr, c: prev, expireAt: now + o.resetAfter}
	return o
}

func fixedWindow(l sluice.Limit, st *state, now, cost int64) outcome {
	w, limit := l.Window.Milliseconds(), l.Capacity
	idx := now / w
	var curr int64
	if st != nil && st.a == idx {
		curr = st.b
	}
	elapsed := now - idx*w
	var o outcome
	if curr+cost <= limit {
		o.allowed = true
		curr += cost
		if cost > 0 {
			o.write = true
		}
	} else {
		o.retryAfter = w - elapsed
	}
	o.remaining = max(0, limit-curr)
	if curr > 0 {
		o.resetAfter = w - elapsed
	}
	o.next = state{a: idx, b: curr, expireAt: now + o.resetAfter}
	return o
}
