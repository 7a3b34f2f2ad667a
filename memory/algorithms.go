package memory

import "github.com/sluicelabs/sluice"

// The arithmetic below is the same, step for step, as the Lua in package
// redis, so both stores reach identical decisions. Every value stays an
// integer below 2^53, which Lua's doubles hold exactly.

// state is one limit's counter. For a token bucket: a = tokens in units of
// 1/interval, b = last refill (ms), c = the interval those units refer to. For
// the windows: a = window index, b = count in it, c = count in the previous
// window (sliding only); a calendar window's index is its period's (see
// sluice.Period). For credits: a = index of the last refill period applied,
// b = balance.
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

// floorDiv rounds down also below zero (a bucket in debt), as Lua's
// math.floor does.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// decide applies cost to one limit at time now (ms). st is nil when no state
// exists.
//
// A clock can step backwards (an NTP correction, a Redis failover to a host
// whose clock is behind). Deciding at such a time would reopen a window that
// is already spent, so a limit is decided at the time its state was last
// written when that is later, and the waits it reports are counted from the
// real now.
func decide(l sluice.Limit, st *state, now, cost int64) outcome {
	switch {
	case l.Algorithm == sluice.AlgorithmCredits:
		return credits(l, st, now, cost)
	case l.Calendar != "":
		return calendarWindow(l, st, now, cost)
	}
	skew := int64(0)
	if st != nil {
		switch l.Algorithm {
		case sluice.AlgorithmTokenBucket:
			skew = max(0, st.b-now)
		default:
			skew = max(0, st.a*l.Window.Milliseconds()-now)
		}
	}
	var o outcome
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket:
		o = tokenBucket(l, st, now+skew, cost)
	case sluice.AlgorithmConcurrency:
		panic("memory: a concurrency limit is decided by decideLeases")
	case sluice.AlgorithmSlidingWindow:
		o = slidingWindow(l, st, now+skew, cost)
	default:
		o = fixedWindow(l, st, now+skew, cost)
	}
	if o.retryAfter > 0 {
		o.retryAfter += skew
	}
	if o.resetAfter > 0 {
		o.resetAfter += skew
	}
	return o
}

func tokenBucket(l sluice.Limit, st *state, now, cost int64) outcome {
	n, p := l.RefillRate()
	full := l.Capacity * p
	tokens, last := full, now
	if st != nil {
		tokens, last = st.a, st.b
		if st.c != p {
			// The rate changed: carry over whole tokens only, at most a
			// full bucket, so the product stays below 2^53 (a bucket of a
			// much larger capacity would otherwise overflow).
			tokens = min(floorDiv(tokens, st.c), l.Capacity) * p
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
	// Tokens below zero are a settled hold's debt (see holds.go).
	o.remaining = max(0, tokens/p)
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

// neverExpires is the expiry of a state that dropping would lose (a credits
// balance): beyond any clock, below 2^53.
const neverExpires = int64(1) << 52

// calendarWindow is a fixed window whose windows are calendar periods. A
// state from a later period than now's (a clock stepped back) is judged in
// its own period, so a spent quota is not reopened.
func calendarWindow(l sluice.Limit, st *state, now, cost int64) outcome {
	p, _ := l.PeriodAt(now)
	if st != nil && st.a > p.Index {
		next, _ := l.PeriodAt(p.End)
		p = sluice.Period{Index: st.a, End: next.End}
	}
	var curr int64
	if st != nil && st.a == p.Index {
		curr = st.b
	}
	var o outcome
	if curr+cost <= l.Capacity {
		o.allowed = true
		curr += cost
		o.write = cost > 0
	} else {
		o.retryAfter = p.End - now
	}
	o.remaining = max(0, l.Capacity-curr)
	if curr > 0 {
		o.resetAfter = p.End - now
	}
	o.next = state{a: p.Index, b: curr, expireAt: now + o.resetAfter}
	return o
}

// credits spends cost from a balance after the refills due (see
// sluice.Limit.ApplyRefill). A deny waits for the next refill (0 without
// one: only a top-up helps). A set refill's balance can be dropped at the
// next refill, which restores it anyway; any other balance is kept.
func credits(l sluice.Limit, st *state, now, cost int64) outcome {
	p, refills := l.PeriodAt(now)
	balance, last := l.Refill.Amount, p.Index
	if st != nil {
		balance = l.ApplyRefill(st.b, st.a, p.Index)
		last = max(st.a, p.Index) // a clock stepped back refills nothing twice
	}
	var o outcome
	if balance >= cost {
		o.allowed = true
		balance -= cost
		o.write = cost > 0
	} else if refills {
		o.retryAfter = p.End - now
	}
	o.remaining = balance
	o.next = state{a: last, b: balance, expireAt: neverExpires}
	if refills {
		o.resetAfter = p.End - now
		if l.Refill.Mode == sluice.RefillSet && last == p.Index {
			o.next.expireAt = p.End
		}
	}
	return o
}

// creditsTopUp is the state after a top-up of t at now on st (nil when
// none), with refills due applied first.
func creditsTopUp(t sluice.TopUp, st *state, now int64) state {
	o := credits(t.Limit, st, now, 0)
	next := o.next
	if t.SetBalance {
		next.b = t.Set
	} else {
		next.b = min(next.b+t.Add, sluice.MaxCredits)
	}
	return next
}
