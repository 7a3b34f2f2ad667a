package sluice

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Concurrency returns a concurrency limit: at most limit units held at once,
// each lease freed after ttl unless released or extended before.
func Concurrency(limit int64, ttl time.Duration) Limit {
	return Limit{Name: "concurrency", Algorithm: AlgorithmConcurrency, Capacity: limit, TTL: ttl}
}

// MaxConcurrency bounds a concurrency limit's capacity: a store reads every
// lease of a subject on each check, so the bound keeps that cheap.
const MaxConcurrency = 100_000

// MaxHoldTTL bounds a lease or reservation TTL.
const MaxHoldTTL = 24 * time.Hour

// DefaultHoldTTL is the TTL of a reservation whose check has no concurrency
// limit and no Request.HoldTTL.
const DefaultHoldTTL = 5 * time.Minute

func (l Limit) validateConcurrency() error {
	if l.Capacity <= 0 {
		return invalidf("limit %q: limit must be a positive integer, got %d", l.Name, l.Capacity)
	}
	if l.Capacity > MaxConcurrency {
		return invalidf("limit %q: a concurrency limit holds at most %d, got %d", l.Name, MaxConcurrency, l.Capacity)
	}
	if err := validateHoldTTL(l.TTL); err != nil {
		return invalidf("limit %q: %s", l.Name, err)
	}
	if l.RefillPerSecond != 0 || l.Window != 0 {
		return invalidf("limit %q: a concurrency limit has only a limit and a ttl, no refill rate or window", l.Name)
	}
	return nil
}

func validateHoldTTL(ttl time.Duration) error {
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("ttl must be at least 1ms, got %v", ttl)
	case ttl%time.Millisecond != 0:
		return fmt.Errorf("ttl must be a whole number of milliseconds, got %v", ttl)
	case ttl > MaxHoldTTL:
		return fmt.Errorf("ttl must be at most %v, got %v", FormatWindow(MaxHoldTTL), ttl)
	}
	return nil
}

// Holds reports whether a check of r, if allowed, takes a hold: it costs
// something and reserves it or passes a concurrency limit.
func (r Request) Holds() bool {
	if r.Cost <= 0 {
		return false
	}
	if r.Reserve {
		return true
	}
	for i := range r.Limits {
		if r.Limits[i].Algorithm == AlgorithmConcurrency {
			return true
		}
	}
	return false
}

// HoldTTLOf returns the TTL of the hold a check of r takes: Request.HoldTTL
// when set, else the shortest TTL of its concurrency limits, else
// DefaultHoldTTL.
func (r Request) HoldTTLOf() time.Duration {
	if r.HoldTTL > 0 {
		return r.HoldTTL
	}
	ttl := time.Duration(0)
	for i := range r.Limits {
		if l := r.Limits[i]; l.Algorithm == AlgorithmConcurrency && (ttl == 0 || l.TTL < ttl) {
			ttl = l.TTL
		}
	}
	if ttl == 0 {
		return DefaultHoldTTL
	}
	return ttl
}

// Hold is what an allowed check took that can be given back: its leases and,
// for a reservation, its estimated cost.
type Hold struct {
	// ID names the hold in HoldOp. It is unguessable and carries the hash
	// tag of the subject's counters, so the store finds the hold on the
	// node that holds them.
	ID string
	// ExpiresIn is how long the hold lives unless extended.
	ExpiresIn time.Duration
}

// HoldAction is what a HoldOp does.
type HoldAction string

const (
	HoldSettle  HoldAction = "settle"
	HoldRelease HoldAction = "release"
	HoldExtend  HoldAction = "extend"
)

// HoldOp settles, releases or extends one hold.
type HoldOp struct {
	// Tenant must be the tenant whose check took the hold: another
	// tenant's hold is HoldUnknown.
	Tenant string
	ID     string
	Action HoldAction
	// Cost is the actual cost, for HoldSettle.
	Cost int64
	// Limits, when set, returns the limits of rule (the hold's) as they
	// are now, and a settle is judged against them: each reserved part is
	// corrected under the limit of the same counter (name, algorithm and
	// window) among them, so a capacity or rate changed since the check
	// applies (a settle above the estimate after a capacity cut is charged
	// from the lowered level). A part with no such limit, or every part
	// when Limits is nil, is corrected under the figures it was reserved
	// under. The cost must still fit those figures (SettleCost). Stores
	// call it at most once per op, possibly holding a lock: it must be
	// cheap and must not call the store.
	Limits func(rule string) []Limit
	// Now, when non-zero, is the time of the operation (tests only).
	Now time.Time
}

// HoldStatus is how a HoldOp ended.
type HoldStatus string

const (
	// HoldSettled, HoldReleased, HoldExtended: the operation was applied.
	HoldSettled  HoldStatus = "settled"
	HoldReleased HoldStatus = "released"
	HoldExtended HoldStatus = "extended"
	// HoldExpired: the hold's TTL had passed; nothing changed.
	HoldExpired HoldStatus = "expired"
	// HoldFinished: the hold was settled or released before; nothing
	// changed.
	HoldFinished HoldStatus = "finished"
	// HoldUnknown: the store knows no such hold of this tenant; nothing
	// changed.
	HoldUnknown HoldStatus = "unknown"
)

// Applied reports whether the operation changed the hold.
func (s HoldStatus) Applied() bool {
	return s == HoldSettled || s == HoldReleased || s == HoldExtended
}

// HoldResult is a store's answer to a HoldOp.
type HoldResult struct {
	Status HoldStatus
	// Rule and Subject are those of the check that took the hold (when
	// the hold was found), so callers can count it and forget cached
	// denies a refund made stale.
	Rule    string
	Subject string
	// ExpiresIn is the hold's remaining life after an extend.
	ExpiresIn time.Duration
	// LeasesFreed is the units of lease the operation freed.
	LeasesFreed int64
	// Refunded reports a settle below the estimate reserved on some rate
	// limit: quota may have come back without time passing, so cached
	// denies of the subject may be stale.
	Refunded bool
}

// Holder is a Store that also keeps holds: concurrency limits and
// reserve-then-settle.
//
// A concurrency limit (Concurrency) admits a check while fewer than its
// capacity of units are held; a check that passes it takes a lease of its
// cost's weight. A check may also reserve its cost (Request.Reserve): the cost
// is an estimate, charged to the rate limits now and corrected later. Either
// way the Decision carries one Hold for everything the check took that can be
// given back:
//
//   - settle (HoldSettle) with the actual cost: the difference is refunded or
//     charged to each rate limit (a token bucket gets tokens back, at most up
//     to its capacity, or goes into debt, at most a full bucket deep, that
//     later checks wait out; a window
//     gets its count corrected in the window the estimate was charged to,
//     while that window still counts), and the leases are freed;
//   - release (HoldRelease): the estimate stands, the leases are freed;
//   - extend (HoldExtend): the leases and the hold live another TTL;
//   - nothing: at its TTL the hold expires, its leases are freed and its
//     estimate stands. A holder that crashes can never hold a limit for ever.
//
// All of it happens inside the store's one atomic step: a check that a rate
// limit denies takes no lease, one that a concurrency limit denies consumes
// no tokens. A concurrency deny's RetryAfter is when enough leases expire for
// the check to fit: an upper bound, since holders usually release sooner.
//
// Settle, release and extend of a hold that has expired or was already
// settled or released change nothing and say so (HoldExpired, HoldFinished);
// a hold id the store does not know (never issued, another tenant's, or gone
// long after it expired) is HoldUnknown.
//
// A Holder's Check takes a hold exactly
// when the request Holds() and is allowed, and returns it in Decision.Hold.
//
// Hold applies op atomically. It returns an error wrapping ErrInvalid for a
// malformed op (see HoldOp.Validate) and one wrapping ErrStoreUnavailable
// when the store cannot be reached; a hold that is expired, finished or
// unknown is not an error but a status, and the op changes nothing.
type Holder interface {
	Store
	Hold(ctx context.Context, op HoldOp) (HoldResult, error)
}

// ErrHoldsUnsupported is returned for a check with a concurrency limit or a
// reservation on a store that keeps no holds.
var ErrHoldsUnsupported = errors.New("this store does not keep holds (concurrency limits and reservations)")

// holdNonceLen is the length of a hold id's random part: 16 bytes in
// unpadded URL-safe base64.
const holdNonceLen = 22

// NewHoldID returns a fresh hold id for a check of (tenant, rule, subject):
// the subject tag, a '.', and 128 random bits.
func NewHoldID(tenant, rule, subject string) string {
	var raw [16]byte
	rand.Read(raw[:]) // never fails (crypto/rand)
	buf := make([]byte, 0, SubjectTagLen+1+holdNonceLen)
	buf = AppendSubjectTag(buf, tenant, rule, subject)
	buf = append(buf, '.')
	return string(base64.RawURLEncoding.AppendEncode(buf, raw[:]))
}

// SplitHoldID returns the subject tag and the random part of a hold id, or
// an error wrapping ErrInvalid when id is not one.
func SplitHoldID(id string) (tag, nonce string, err error) {
	tag, nonce, ok := strings.Cut(id, ".")
	if !ok || len(tag) != SubjectTagLen || len(nonce) != holdNonceLen || !urlBase64(tag) || !urlBase64(nonce) {
		return "", "", invalidf("hold id %q is malformed: want the id a check's decision returned", truncate(id, 64))
	}
	return tag, nonce, nil
}

func urlBase64(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// HoldKey is the store key of a hold's record: beside its subject's
// counters, under the same hash tag.
func HoldKey(prefix, tag, nonce string) string {
	return prefix + "{" + tag + "}:hold:" + nonce
}

// Validate reports what is wrong with op, in a sentence.
func (op HoldOp) Validate() error {
	if _, _, err := SplitHoldID(op.ID); err != nil {
		return err
	}
	switch op.Action {
	case HoldSettle:
		if op.Cost < 0 {
			return invalidf("settle cost must not be negative, got %d", op.Cost)
		}
		if op.Cost > maxExact/4 {
			return invalidf("settle cost %d is too large", op.Cost)
		}
	case HoldRelease, HoldExtend:
		if op.Cost != 0 {
			return invalidf("only a settle carries a cost")
		}
	default:
		return invalidf("unknown hold action %q (want settle, release or extend)", op.Action)
	}
	return nil
}

// SettleCost checks an actual cost against the limits of a hold: like a
// check's cost, it must fit every rate limit's capacity (a concurrency
// limit's lease is freed, whatever the cost).
func SettleCost(limits []Limit, cost int64) error {
	for _, l := range limits {
		if l.Algorithm != AlgorithmConcurrency && cost > l.MaxCost() {
			return invalidf("settle cost %d can never fit limit %q, which holds at most %d", cost, l.Name, l.MaxCost())
		}
	}
	return nil
}

// WindowColumn is the duration a catalog stores in a limit's window column:
// the window, or a concurrency limit's lease TTL (which has no window), so
// catalogs need no column of their own for it.
func WindowColumn(l Limit) time.Duration {
	if l.Algorithm == AlgorithmConcurrency {
		return l.TTL
	}
	return l.Window
}

// WithWindowColumn returns l with the duration read from a catalog's window
// column put where WindowColumn took it from.
func (l Limit) WithWindowColumn(d time.Duration) Limit {
	if l.Algorithm == AlgorithmConcurrency {
		l.TTL = d
	} else {
		l.Window = d
	}
	return l
}
