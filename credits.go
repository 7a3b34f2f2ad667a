package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// AlgorithmCredits is a prepaid balance per subject: each check spends its
// cost from it, a check whose cost exceeds the balance is denied (and, as any
// deny, spends nothing anywhere), and only a top-up (CreditStore.TopUp) or
// the limit's Refill raises it. The balance is never negative. A subject's
// balance starts at Refill.Amount (0 without a refill).
const AlgorithmCredits Algorithm = "credits"

// RefillMode says what a refill does at the start of each period.
type RefillMode string

const (
	// RefillSet restores the balance to the refill amount: unspent credits
	// do not carry over, and a top-up lasts until the next refill.
	RefillSet RefillMode = "set"
	// RefillAdd adds the amount, up to Max when Max is set.
	RefillAdd RefillMode = "add"
)

// Refill is a credits limit's schedule: at the start of every period (a UTC
// calendar day or month, or a span aligned to the Unix epoch) the balance
// is set to, or raised by, Amount. Refills are applied lazily, at the next
// check or top-up, for every period start passed since the last one. The
// zero Refill is none.
type Refill struct {
	// Every is CalendarDay or CalendarMonth (UTC), or "" with Period.
	Every  Calendar
	Period time.Duration
	Amount int64
	Mode   RefillMode
	// Max caps what RefillAdd raises the balance to; 0 is no cap. A top-up
	// may go past it.
	Max int64
}

// MaxCredits bounds a balance, a refill amount and a top-up: stores count
// exactly below 2^53 (see maxExact).
const MaxCredits = maxExact / 4

// Credits returns a credits limit named "credits" with the given refill
// (the zero Refill for a balance only top-ups raise).
func Credits(refill Refill) Limit {
	return Limit{Name: "credits", Algorithm: AlgorithmCredits, Refill: refill}
}

// MaxCost is the most one check may cost under l: its capacity, or
// MaxCredits for a credits limit, whose balance top-ups can raise.
func (l Limit) MaxCost() int64 {
	if l.Algorithm == AlgorithmCredits {
		return MaxCredits
	}
	return l.Capacity
}

// DecisionLimit is the figure a decision reports as l's limit: its capacity,
// or for a credits limit what a refill brings the balance to (Max in add
// mode, else Amount; 0 without a refill).
func (l Limit) DecisionLimit() int64 {
	if l.Algorithm == AlgorithmCredits {
		if l.Refill.Mode == RefillAdd && l.Refill.Max > 0 {
			return l.Refill.Max
		}
		return l.Refill.Amount
	}
	return l.Capacity
}

func (l Limit) validateCredits() error {
	if l.Capacity != 0 || l.RefillPerSecond != 0 || l.Window != 0 || l.Calendar != "" || l.TTL != 0 {
		return invalidf("limit %q: a credits limit takes only a refill (every, amount, mode, max), not capacity, limit, window or ttl", l.Name)
	}
	if l.Lease != "" {
		return invalidf("limit %q: a credits limit never leases; its balance is spent in the store only", l.Name)
	}
	r := l.Refill
	if r == (Refill{}) {
		return nil
	}
	switch {
	case r.Every != "" && !r.Every.Valid():
		return invalidf("limit %q: refill every must be \"day\", \"month\" or a duration like \"12h\", got %q", l.Name, truncate(string(r.Every), 64))
	case r.Every != "" && r.Period != 0:
		return invalidf("limit %q: refill every is either a calendar period or a duration, not both", l.Name)
	case r.Every == "" && r.Period < time.Second:
		return invalidf("limit %q: refill every must be \"day\", \"month\" or a duration of at least 1s, got %v", l.Name, r.Period)
	case r.Every == "" && r.Period%time.Millisecond != 0:
		return invalidf("limit %q: refill every must be a whole number of milliseconds, got %v", l.Name, r.Period)
	case r.Amount <= 0:
		return invalidf("limit %q: refill amount must be a positive integer, got %d", l.Name, r.Amount)
	case r.Amount > MaxCredits:
		return invalidf("limit %q: refill amount %d is too large (at most %d)", l.Name, r.Amount, int64(MaxCredits))
	case r.Mode != RefillSet && r.Mode != RefillAdd:
		return invalidf("limit %q: refill mode must be \"set\" or \"add\", got %q", l.Name, truncate(string(r.Mode), 64))
	case r.Max < 0 || r.Max > MaxCredits:
		return invalidf("limit %q: refill max must be a positive integer of at most %d, got %d", l.Name, int64(MaxCredits), r.Max)
	case r.Max != 0 && r.Mode != RefillAdd:
		return invalidf("limit %q: refill max caps an \"add\" refill; a \"set\" refill sets the balance to its amount", l.Name)
	case r.Max != 0 && r.Max < r.Amount:
		return invalidf("limit %q: refill max %d is below the amount %d", l.Name, r.Max, r.Amount)
	}
	return nil
}

// TopUp raises (Add) or sets (Set) a subject's balance of a credits limit,
// once per IdempotencyKey: a retried top-up with the same key within
// IdempotencyTTL changes nothing.
type TopUp struct {
	Tenant, Rule, Subject string
	Limit                 Limit
	// Exactly one of Add (> 0) and Set (>= 0, with SetBalance) applies.
	Add        int64
	Set        int64
	SetBalance bool
	// IdempotencyKey names the top-up (1-200 bytes).
	IdempotencyKey string
	// Now, when non-zero, is the time of the top-up (tests only).
	Now time.Time
}

// TopUpResult is a top-up's answer: the balance after it, and whether it was
// applied (false for a repeated idempotency key).
type TopUpResult struct {
	Balance int64
	Applied bool
}

// IdempotencyTTL is how long a store remembers a top-up's idempotency key.
const IdempotencyTTL = 24 * time.Hour

// MaxIdempotencyKeyBytes bounds an idempotency key.
const MaxIdempotencyKeyBytes = 200

// Validate reports what is wrong with t, in a sentence.
func (t TopUp) Validate() error {
	if t.Limit.Algorithm != AlgorithmCredits {
		return invalidf("limit %q is a %s limit; only a credits limit can be topped up", t.Limit.Name, t.Limit.Algorithm)
	}
	if err := t.Limit.Validate(); err != nil {
		return err
	}
	switch {
	case t.SetBalance && t.Add != 0:
		return invalidf("a top-up either adds or sets the balance, not both")
	case t.SetBalance && (t.Set < 0 || t.Set > MaxCredits):
		return invalidf("a top-up's set must be a balance from 0 to %d, got %d", int64(MaxCredits), t.Set)
	case !t.SetBalance && t.Add <= 0:
		return invalidf("a top-up's add must be a positive number of credits, got %d", t.Add)
	case !t.SetBalance && t.Add > MaxCredits:
		return invalidf("a top-up's add %d is too large (at most %d)", t.Add, int64(MaxCredits))
	case t.IdempotencyKey == "":
		return invalidf("a top-up needs an idempotency_key, so that a retried one is applied once")
	case len(t.IdempotencyKey) > MaxIdempotencyKeyBytes:
		return invalidf("the idempotency_key is %d bytes, more than the %d allowed", len(t.IdempotencyKey), MaxIdempotencyKeyBytes)
	case len(t.Subject) > MaxSubjectBytes:
		return invalidf("subject is %d bytes, more than the %d allowed", len(t.Subject), MaxSubjectBytes)
	}
	return nil
}

// CreditStore is a Store that tops up credits limits. Both stores of this
// module are. A top-up is one atomic step in the store: it applies the
// refills due, then the top-up, and records the idempotency key, so
// concurrent checks and top-ups never lose one another's changes.
type CreditStore interface {
	Store
	TopUp(ctx context.Context, t TopUp) (TopUpResult, error)
}

// ApplyRefill returns the balance after the refills due from period index
// last to now (the indexes of l's refill periods): none when now <= last, a
// set refill restores Amount, an add refill adds Amount per period start
// passed, up to Max (a balance already above Max, by a top-up, stays).
// Stores apply exactly this, the Redis script in Lua.
func (l Limit) ApplyRefill(balance, last, now int64) int64 {
	r := l.Refill
	if r.Amount <= 0 || now <= last {
		return balance
	}
	if r.Mode == RefillSet {
		return r.Amount
	}
	n := now - last
	if r.Max > 0 {
		if balance >= r.Max {
			return balance
		}
		if n >= ceilDivInt(r.Max-balance, r.Amount) {
			return r.Max
		}
		return balance + n*r.Amount
	}
	// Uncapped: bounded so sums stay exact.
	if n >= ceilDivInt(MaxCredits-min(balance, MaxCredits), r.Amount) {
		return max(balance, MaxCredits)
	}
	return balance + n*r.Amount
}

func ceilDivInt(a, b int64) int64 { return (a + b - 1) / b }

// String of a credits limit, for logs and test failures.
func (l Limit) creditsString() string {
	r := l.Refill
	if r.Amount == 0 {
		return fmt.Sprintf("%s: credits, topped up only", l.Name)
	}
	every := string(r.Every)
	if every == "" {
		every = FormatWindow(r.Period)
	}
	s := fmt.Sprintf("%s: credits, refill %s %d every %s", l.Name, r.Mode, r.Amount, every)
	if r.Max > 0 {
		s += fmt.Sprintf(" up to %d", r.Max)
	}
	return s
}

// RefillColumn is how a catalog stores a refill in one text column:
// "every amount mode max", as "month 1000 set 0" or "12h 5 add 50"; "" for
// none. ParseRefillColumn reads it back.
func RefillColumn(r Refill) string {
	if r == (Refill{}) {
		return ""
	}
	every := string(r.Every)
	if every == "" {
		every = FormatWindow(r.Period)
	}
	return fmt.Sprintf("%s %d %s %d", every, r.Amount, r.Mode, r.Max)
}

// ParseRefillColumn reads what RefillColumn wrote.
func ParseRefillColumn(s string) (Refill, error) {
	if s == "" {
		return Refill{}, nil
	}
	var r Refill
	var every, mode string
	if _, err := fmt.Sscanf(s, "%s %d %s %d", &every, &r.Amount, &mode, &r.Max); err != nil {
		return Refill{}, fmt.Errorf("refill column %q: %w", s, err)
	}
	r.Mode = RefillMode(mode)
	if err := r.SetEvery(every); err != nil {
		return Refill{}, err
	}
	return r, nil
}

// SetEvery sets the schedule from its wire form: "day", "month" or a
// duration ParseWindow reads ("12h", "7d").
func (r *Refill) SetEvery(every string) error {
	if c := Calendar(every); c.Valid() {
		r.Every, r.Period = c, 0
		return nil
	}
	d, err := ParseWindow(every)
	if err != nil {
		return invalidf("refill every must be \"day\", \"month\" or a duration: %s", err)
	}
	r.Every, r.Period = "", d
	return nil
}

// EveryString is the schedule's wire form (see SetEvery).
func (r Refill) EveryString() string {
	if r.Every != "" {
		return string(r.Every)
	}
	return FormatWindow(r.Period)
}

// ErrCreditsUnsupported is returned for a top-up on a store that keeps no
// credits balances.
var ErrCreditsUnsupported = errors.New("this store does not keep credits balances")

// AuditCreditsTopUp is the audit action of a top-up (see
// Catalog.RecordTopUp).
const AuditCreditsTopUp = "credits.top_up"
