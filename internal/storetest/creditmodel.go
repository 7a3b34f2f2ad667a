package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicelabs/sluice"
)

// creditModel is a plain reference of credits limits and calendar windows,
// written from DESIGN.md rather than from the stores: calendar periods from
// the time package's own dates, refills applied one period at a time.
type creditModel struct {
	balances map[string]*modelBalance
	counts   map[string]map[int64]int64 // key -> period start ms -> count
	seen     map[string]int64           // idempotency record -> expiry ms
}

type modelBalance struct {
	balance int64
	last    time.Time // a time in the last period refilled
}

func newCreditModel() *creditModel {
	return &creditModel{balances: map[string]*modelBalance{}, counts: map[string]map[int64]int64{}, seen: map[string]int64{}}
}

// modelPeriod is the period of cal (or of span) holding t in loc: its start
// and end.
func modelPeriod(cal sluice.Calendar, span time.Duration, loc *time.Location, t time.Time) (time.Time, time.Time) {
	switch cal {
	case sluice.CalendarMonth:
		y, m, _ := t.In(loc).Date()
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	case sluice.CalendarDay:
		y, m, d := t.In(loc).Date()
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	// Truncate counts from year 1, which is a whole number of days before
	// the Unix epoch: spans that divide a day align alike.
	start := t.Truncate(span)
	return start, start.Add(span)
}

// refillPeriod is l's refill period holding t; ok false without a refill.
func refillPeriod(l sluice.Limit, t time.Time) (start, end time.Time, ok bool) {
	if l.Refill.Amount == 0 {
		return time.Time{}, time.Time{}, false
	}
	start, end = modelPeriod(l.Refill.Every, l.Refill.Period, time.UTC, t)
	return start, end, true
}

// balanceAt is the balance of key at t, every refill since its last
// applied period by period. A subject's balance exists once spent or
// topped up; until then it is the refill amount, whenever asked.
func (m *creditModel) balanceAt(key string, l sluice.Limit, t time.Time) *modelBalance {
	b := m.balances[key]
	if b == nil {
		return &modelBalance{balance: l.Refill.Amount, last: t}
	}
	_, end, ok := refillPeriod(l, b.last)
	for ok && !end.After(t) {
		r := l.Refill
		switch {
		case r.Mode == sluice.RefillSet:
			b.balance = r.Amount
		case r.Max == 0:
			b.balance = min(b.balance+r.Amount, sluice.MaxCredits)
		case b.balance < r.Max:
			b.balance = min(b.balance+r.Amount, r.Max)
		}
		b.last = end
		_, end, _ = refillPeriod(l, end)
	}
	if t.After(b.last) {
		b.last = t
	}
	return b
}

func calendarZone(l sluice.Limit) *time.Location {
	loc, err := time.LoadLocation(l.TimeZone)
	if err != nil {
		panic(err)
	}
	return loc
}

// check decides r at r.Now and applies it.
func (m *creditModel) check(r sluice.Request) sluice.Decision {
	t := r.Now
	now := t.UnixMilli()
	fits := make([]bool, len(r.Limits))
	allowed := true
	for i, l := range r.Limits {
		key := modelKey(r, l)
		if l.Algorithm == sluice.AlgorithmCredits {
			fits[i] = m.balanceAt(key, l, t).balance >= r.Cost
		} else {
			start, _ := modelPeriod(l.Calendar, 0, calendarZone(l), t)
			fits[i] = m.counts[key][start.UnixMilli()]+r.Cost <= l.Capacity
		}
		allowed = allowed && fits[i]
	}
	d := sluice.Decision{}
	for i, l := range r.Limits {
		key := modelKey(r, l)
		ld := sluice.LimitDecision{Name: l.Name, Algorithm: l.Algorithm, Allowed: fits[i], Limit: l.DecisionLimit(), Window: sluice.PolicyWindow(l)}
		if l.Algorithm == sluice.AlgorithmCredits {
			b := m.balanceAt(key, l, t)
			if allowed && r.Cost > 0 {
				b.balance -= r.Cost
				m.balances[key] = b
			}
			ld.Remaining = b.balance
			if _, end, ok := refillPeriod(l, t); ok {
				ld.ResetAfter = ms(end.UnixMilli() - now)
				if !fits[i] {
					ld.RetryAfter = ld.ResetAfter
				}
			}
		} else {
			start, end := modelPeriod(l.Calendar, 0, calendarZone(l), t)
			if m.counts[key] == nil {
				m.counts[key] = map[int64]int64{}
			}
			if allowed {
				m.counts[key][start.UnixMilli()] += r.Cost
			}
			count := m.counts[key][start.UnixMilli()]
			ld.Remaining = max(0, l.Capacity-count)
			if count > 0 {
				ld.ResetAfter = ms(end.UnixMilli() - now)
			}
			if !fits[i] {
				ld.RetryAfter = ms(end.UnixMilli() - now)
			}
		}
		d.Limits = append(d.Limits, ld)
	}
	d.Combine()
	return d
}

// topUp applies u as DESIGN.md says.
func (m *creditModel) topUp(u sluice.TopUp) sluice.TopUpResult {
	r := sluice.Request{Tenant: u.Tenant, Rule: u.Rule, Subject: u.Subject}
	key := modelKey(r, u.Limit)
	b := m.balanceAt(key, u.Limit, u.Now)
	m.balances[key] = b
	rec := key + "\x00" + u.IdempotencyKey
	if m.seen[rec] > u.Now.UnixMilli() {
		return sluice.TopUpResult{Balance: b.balance}
	}
	m.seen[rec] = u.Now.Add(sluice.IdempotencyTTL).UnixMilli()
	if u.SetBalance {
		b.balance = u.Set
	} else {
		b.balance = min(b.balance+u.Add, sluice.MaxCredits)
	}
	return sluice.TopUpResult{Balance: b.balance, Applied: true}
}

// creditLimits are the limits the property draws from: credits of every
// schedule and calendar windows in three zones.
var creditLimits = []sluice.Limit{
	sluice.Credits(sluice.Refill{Every: sluice.CalendarMonth, Amount: 30, Mode: sluice.RefillSet}).Named("monthly"),
	sluice.Credits(sluice.Refill{Every: sluice.CalendarDay, Amount: 7, Mode: sluice.RefillAdd, Max: 20}).Named("daily"),
	sluice.Credits(sluice.Refill{Period: 90 * time.Minute, Amount: 4, Mode: sluice.RefillAdd}).Named("span"),
	sluice.Credits(sluice.Refill{}).Named("prepaid"),
	{Name: "day", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 12, Calendar: sluice.CalendarDay},
	{Name: "month", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 40, Calendar: sluice.CalendarMonth, TimeZone: "Europe/Berlin"},
	{Name: "ny", Algorithm: sluice.AlgorithmFixedWindow, Capacity: 9, Calendar: sluice.CalendarDay, TimeZone: "America/New_York"},
}

// CreditsMatchModel drives random checks and top-ups of credits limits and
// calendar windows (one to three of them per rule, so all-or-nothing is
// exercised across them) through the reference model and every given store,
// over steps from none to forty days (across month ends and daylight-saving
// changes), and requires identical decisions and top-up answers.
func CreditsMatchModel(t *testing.T, stores ...NamedStore) {
	rapid.Check(t, func(rt *rapid.T) {
		picks := rapid.SliceOfNDistinct(rapid.IntRange(0, len(creditLimits)-1), 1, 3, func(i int) int { return i }).Draw(rt, "limits")
		var limits []sluice.Limit
		var credits []sluice.Limit
		maxCost := int64(15)
		for _, i := range picks {
			limits = append(limits, creditLimits[i])
			if creditLimits[i].Algorithm == sluice.AlgorithmCredits {
				credits = append(credits, creditLimits[i])
			} else {
				maxCost = min(maxCost, creditLimits[i].Capacity)
			}
		}
		model := newCreditModel()
		tenant := fmt.Sprintf("credits-%d", runs.Add(1))
		// From Base, early 2027, to past the March daylight-saving change.
		now := Base.Add(time.Duration(rapid.Int64Range(0, 60*24).Draw(rt, "start minutes")) * time.Minute)
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 4).Draw(rt, "step kind") {
			case 0:
			case 1:
				now = now.Add(time.Duration(rapid.Int64Range(1, 120_000).Draw(rt, "ms")) * time.Millisecond)
			case 2:
				now = now.Add(time.Duration(rapid.Int64Range(1, 48).Draw(rt, "hours")) * time.Hour)
			case 3:
				now = now.Add(time.Duration(rapid.Int64Range(1, 40).Draw(rt, "days")) * 24 * time.Hour)
			default:
				// Just before or at a boundary of the next UTC day.
				next := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
				now = next.Add(-time.Duration(rapid.Int64Range(0, 1).Draw(rt, "before")) * time.Millisecond)
			}
			subject := rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "subject")
			if len(credits) > 0 && rapid.IntRange(0, 3).Draw(rt, "top up?") == 0 {
				u := sluice.TopUp{Tenant: tenant, Rule: "r", Subject: subject, Now: now,
					Limit:          rapid.SampledFrom(credits).Draw(rt, "top-up limit"),
					IdempotencyKey: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "key")}
				if rapid.Bool().Draw(rt, "set") {
					u.SetBalance, u.Set = true, rapid.Int64Range(0, 50).Draw(rt, "set to")
				} else {
					u.Add = rapid.Int64Range(1, 50).Draw(rt, "add")
				}
				want := model.topUp(u)
				for _, s := range stores {
					got, err := s.Store.(sluice.CreditStore).TopUp(context.Background(), u)
					if err != nil || got != want {
						rt.Fatalf("step %d, %s: top-up %+v at %v: got %+v, %v; want %+v", i, s.Name, u, now.UTC(), got, err, want)
					}
				}
				continue
			}
			req := sluice.Request{Tenant: tenant, Rule: "r", Subject: subject, Limits: limits,
				Cost: rapid.Int64Range(0, maxCost).Draw(rt, "cost"), Now: now}
			want := model.check(req)
			for _, s := range stores {
				got, err := s.Store.Check(context.Background(), req)
				if err != nil {
					rt.Fatalf("step %d, %s: %v", i, s.Name, err)
				}
				if diff := compare(want, got); diff != "" {
					rt.Fatalf("step %d, %s at %v cost %d for %s: %s\nmodel: %+v\nstore: %+v", i, s.Name, now.UTC(), req.Cost, subject, diff, want, got)
				}
			}
		}
	})
}

// CreditsNeverOverspend spends one balance from workers callers spread over
// stores (each a client of the same backing store, as two instances are),
// n checks of random costs 1-20 alongside top-ups, and requires the final
// balance to be exactly the initial one plus the top-ups minus the costs
// admitted, and never below zero.
func CreditsNeverOverspend(t *testing.T, stores []sluice.CreditStore, workers, n int) {
	t.Helper()
	limit := sluice.Credits(sluice.Refill{}).Named("balance")
	tenant := fmt.Sprintf("overspend-%d", runs.Add(1))
	const initial = 40_000
	if _, err := stores[0].TopUp(context.Background(), sluice.TopUp{Tenant: tenant, Rule: "r", Subject: "s", Limit: limit,
		Add: initial, IdempotencyKey: "initial"}); err != nil {
		t.Fatal(err)
	}
	var admitted, denied, toppedUp atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			store := stores[w%len(stores)]
			rng := rand.New(rand.NewPCG(uint64(w), 23))
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if i%1000 == 0 {
					// A top-up now and then, twice under one key: applied once.
					for range 2 {
						res, err := store.TopUp(context.Background(), sluice.TopUp{Tenant: tenant, Rule: "r", Subject: "s", Limit: limit,
							Add: 500, IdempotencyKey: fmt.Sprint("top-up-", i)})
						if err != nil {
							errs <- err
							return
						}
						if res.Applied {
							toppedUp.Add(500)
						}
					}
				}
				cost := rng.Int64N(20) + 1
				d, err := store.Check(context.Background(), sluice.Request{Tenant: tenant, Rule: "r", Subject: "s",
					Limits: []sluice.Limit{limit}, Cost: cost})
				if err != nil {
					errs <- err
					return
				}
				if d.Remaining < 0 {
					errs <- fmt.Errorf("balance reported as %d", d.Remaining)
					return
				}
				if d.Allowed {
					admitted.Add(cost)
				} else {
					denied.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d, err := stores[0].Check(context.Background(), sluice.Request{Tenant: tenant, Rule: "r", Subject: "s", Limits: []sluice.Limit{limit}})
	if err != nil {
		t.Fatal(err)
	}
	want := initial + toppedUp.Load() - admitted.Load()
	if d.Remaining != want || want < 0 {
		t.Fatalf("final balance %d, want %d (initial %d + top-ups %d - admitted %d)", d.Remaining, want, initial, toppedUp.Load(), admitted.Load())
	}
	if toppedUp.Load() != int64(n/1000)*500 {
		t.Fatalf("top-ups applied: %d credits, want %d (each key once)", toppedUp.Load(), n/1000*500)
	}
	if denied.Load() == 0 {
		t.Fatalf("no check was denied: the balance never ran out, so the test proved nothing")
	}
}
