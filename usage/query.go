package usage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Step is the length of the periods a Query sums rows over.
type Step string

// The steps rollups are kept at: every flush adds to all three, so each is
// an exact sum on its own, and each is kept for its own time (see the
// Kept constants).
const (
	StepMinute Step = "minute"
	StepHour   Step = "hour"
	StepDay    Step = "day"
)

// Duration returns the step's length, or 0 for an unknown step.
func (s Step) Duration() time.Duration {
	switch s {
	case StepMinute:
		return time.Minute
	case StepHour:
		return time.Hour
	case StepDay:
		return 24 * time.Hour
	}
	return 0
}

// How long hours and days are kept: minutes for the configured retention
// (--usage-retention), hours and days longer so history survives at a
// coarser step. A retention longer than these keeps them as long.
const (
	HoursKept = 400 * 24 * time.Hour
	DaysKept  = 10 * 365 * 24 * time.Hour
)

// DefaultSpan is the range read when a query gives no start: an hour of
// minutes, a day of hours, 30 days of days (0 for an unknown step).
func DefaultSpan(s Step) time.Duration {
	switch s {
	case StepMinute:
		return time.Hour
	case StepHour:
		return 24 * time.Hour
	case StepDay:
		return 30 * 24 * time.Hour
	}
	return 0
}

// MaxPoints bounds the periods one Query may span: a week of minutes.
const MaxPoints = 7 * 24 * 60

// Query selects stored rollups: one namespace's rule (every rule when Rule
// is ""), periods of Step starting in [From, To), both truncated to Step.
type Query struct {
	Namespace, Rule string
	Step            Step
	From, To        time.Time
}

// Validate reports what is wrong with q, in a sentence a user understands.
func (q Query) Validate() error {
	if q.Namespace == "" {
		return errors.New("the namespace (tenant or domain) is required")
	}
	d := q.Step.Duration()
	if d == 0 {
		return fmt.Errorf("step %q is not one of minute, hour or day", q.Step)
	}
	if !q.From.Before(q.To) {
		return fmt.Errorf("from (%s) must be before to (%s)",
			q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	}
	from, to := q.Bounds()
	if n := to.Sub(from) / d; n > MaxPoints {
		return fmt.Errorf("from %s to %s is %d %ss, more than the %d one query may span; use a larger step or a shorter range",
			from.Format(time.RFC3339), to.Format(time.RFC3339), n, q.Step, MaxPoints)
	}
	return nil
}

// Bounds returns From and To truncated to the step, in UTC. To is rounded
// up, so the period under way is included.
func (q Query) Bounds() (from, to time.Time) {
	d := q.Step.Duration()
	if d == 0 {
		return q.From.UTC(), q.To.UTC()
	}
	from = q.From.UTC().Truncate(d)
	to = q.To.UTC().Truncate(d)
	if to.Before(q.To) {
		to = to.Add(d)
	}
	return from, to
}

// Reader reads stored rollups.
type Reader interface {
	// ReadUsage returns the rows q selects, oldest first, rules in byte
	// order within a period. Periods with nothing counted have no row.
	ReadUsage(ctx context.Context, q Query) ([]Row, error)
	// ReadTop returns the heaviest subjects q selects, heaviest first
	// (then by rule and subject).
	ReadTop(ctx context.Context, q TopQuery) ([]TopSubject, error)
	// ReadGaps returns the gaps that overlap q's range (its step is not
	// used), oldest first, merged per rule where they overlap.
	ReadGaps(ctx context.Context, q Query) ([]Gap, error)
}

// By is what TopQuery ranks subjects by.
type By string

// The rankings of top subjects.
const (
	ByDenied By = "denied"
	ByUnits  By = "units"
)

// MaxTopLimit bounds TopQuery.Limit.
const MaxTopLimit = 100

// TopQuery selects the heaviest subjects of one namespace's rule (every
// rule when Rule is ""), over the hours starting in [From, To) (both
// truncated to the hour, To rounded up), ranked by By, at most Limit.
type TopQuery struct {
	Namespace, Rule string
	By              By
	From, To        time.Time
	Limit           int
}

// Bounds returns From and To truncated to the hour, To rounded up.
func (q TopQuery) Bounds() (from, to time.Time) {
	return Query{Step: StepHour, From: q.From, To: q.To}.Bounds()
}

// Validate reports what is wrong with q, in a sentence a user understands.
func (q TopQuery) Validate() error {
	if q.Namespace == "" {
		return errors.New("the namespace (tenant or domain) is required")
	}
	if q.By != ByDenied && q.By != ByUnits {
		return fmt.Errorf("by %q is not denied or units", q.By)
	}
	if q.Limit < 1 || q.Limit > MaxTopLimit {
		return fmt.Errorf("limit %d is not between 1 and %d", q.Limit, MaxTopLimit)
	}
	return Query{Namespace: q.Namespace, Step: StepHour, From: q.From, To: q.To}.Validate()
}

// TopSubject is one subject of a rule among the heaviest over a range: the
// sums of what the instances counted of it in each hour where it was among
// their TopN. A subject that was heavy only at times, or only at some
// instances, is undercounted by what it did outside their lists.
type TopSubject struct {
	Rule, Subject string
	Denied, Units int64
}
