package sluice

import (
	"strconv"
	"sync"
	"time"
)

// Calendar names a calendar period: the windows of a calendar fixed_window
// and the refill schedule of a credits limit. A calendar period is a day or a
// month as a clock on the wall shows it (in UTC unless a time zone is
// named), so "1,000,000 per month" resets at midnight on the 1st, whatever
// the month's length, and a day of a daylight-saving change lasts 23 or 25
// hours.
type Calendar string

const (
	CalendarDay   Calendar = "day"
	CalendarMonth Calendar = "month"
)

// Valid reports whether c is a known calendar period.
func (c Calendar) Valid() bool { return c == CalendarDay || c == CalendarMonth }

// locations caches time.LoadLocation, which reads the zone database: limits
// are validated on every check.
var locations sync.Map // name -> *time.Location

// loadLocation returns the named IANA time zone, UTC for "".
func loadLocation(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, loc)
	return loc, nil
}

// Period is one period of a calendar or of a span: its index (days or months
// since 1970-01-01 in its zone, or spans since the Unix epoch) and its
// bounds in Unix ms, Start included, End excluded.
type Period struct {
	Index, Start, End int64
}

// periodAt returns the period of cal in loc (or, when cal is "", of span,
// aligned to the Unix epoch) that holds ms.
func periodAt(cal Calendar, span time.Duration, loc *time.Location, ms int64) Period {
	if cal == "" {
		w := span.Milliseconds()
		idx := ms / w
		if ms%w != 0 && ms < 0 {
			idx--
		}
		return Period{Index: idx, Start: idx * w, End: (idx + 1) * w}
	}
	t := time.UnixMilli(ms).In(loc)
	y, m, d := t.Date()
	if cal == CalendarMonth {
		start := time.Date(y, m, 1, 0, 0, 0, 0, loc).UnixMilli()
		end := time.Date(y, m+1, 1, 0, 0, 0, 0, loc).UnixMilli()
		return Period{Index: int64(y-1970)*12 + int64(m-1), Start: start, End: end}
	}
	start := time.Date(y, m, d, 0, 0, 0, 0, loc).UnixMilli()
	end := time.Date(y, m, d+1, 0, 0, 0, 0, loc).UnixMilli()
	days := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
	return Period{Index: days, Start: start, End: end}
}

// PeriodAt is the period of l's clock that holds ms (Unix ms): for a
// calendar fixed_window its window, for a credits limit with a refill its
// refill period. ok is false for limits without periods of their own (a
// credits limit without a refill, or any other algorithm).
func (l Limit) PeriodAt(ms int64) (p Period, ok bool) {
	switch {
	case l.Algorithm == AlgorithmFixedWindow && l.Calendar != "":
		loc, err := loadLocation(l.TimeZone)
		if err != nil {
			return Period{}, false
		}
		return periodAt(l.Calendar, 0, loc, ms), true
	case l.Algorithm == AlgorithmCredits && l.Refill.Amount > 0:
		return periodAt(l.Refill.Every, l.Refill.Period, time.UTC, ms), true
	}
	return Period{}, false
}

// AppendPeriodTable appends to dst the periods of l around ms, for a store
// whose clock may differ from this process's (Redis TIME): the index of the
// period before the one holding ms, then the bounds of it and of the next
// two, "i,b0,b1,b2,b3". The store picks the period holding its own time from
// the table, so a calendar in any time zone is exact without a zone database
// in the store, as long as the two clocks are less than a period apart. It
// appends "" for a limit without periods.
func (l Limit) AppendPeriodTable(dst []byte, ms int64) []byte {
	p, ok := l.PeriodAt(ms)
	if !ok {
		return dst
	}
	before, _ := l.PeriodAt(p.Start - 1)
	after, _ := l.PeriodAt(p.End)
	dst = strconv.AppendInt(dst, before.Index, 10)
	for _, b := range [4]int64{before.Start, p.Start, p.End, after.End} {
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, b, 10)
	}
	return dst
}
