package sqlcatalog

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/usage"
)

// Rollups are stored at three steps (usage_by_minute, _hour, _day), keyed
// by a series id that stands for (namespace, rule), and a period start in
// minutes since 1970 UTC: small integer keys keep a rule's day of minutes
// under 200 KB.
var usageTables = []struct {
	name string
	step usage.Step
}{{"usage_by_minute", usage.StepMinute}, {"usage_by_hour", usage.StepHour}, {"usage_by_day", usage.StepDay}}

func usageTable(step usage.Step) string {
	for _, t := range usageTables {
		if t.step == step {
			return t.name
		}
	}
	return ""
}

type usageSeries struct{ namespace, rule string }

// usagePeriod is one row's key: a series and its period's first minute.
type usagePeriod struct {
	series int64
	start  int64 // minutes since 1970 UTC
}

type usageCounts [6]int64

func (c *usageCounts) add(r usage.Row) {
	c[0] += r.Allowed
	c[1] += r.Denied
	c[2] += r.ShadowDenied
	c[3] += r.Degraded
	c[4] += r.Shed
	c[5] += r.Units
}

// seriesIDs caches the id of every series this process has stored: a series
// is never deleted, so an id once committed stays right.
type seriesIDs struct {
	mu  sync.Mutex
	ids map[usageSeries]int64
}

func (s *seriesIDs) get(k usageSeries) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[k]
	return id, ok
}

func (s *seriesIDs) put(m map[usageSeries]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[usageSeries]int64)
	}
	for k, id := range m {
		s.ids[k] = id
	}
}

// AddUsage adds rows to the stored rollups: WriteUsage of rows alone.
func (c *Catalog) AddUsage(ctx context.Context, rows []usage.Row) error {
	return c.WriteUsage(ctx, usage.Batch{Rows: rows})
}

// WriteUsage stores one flush in one transaction. Its rows (each a
// minute's counts) are added to the stored rollups of every step: a period
// another instance wrote already gets the sums. Rows are written in key
// order, so instances flushing at once lock them in the same order and
// never deadlock. Its top subjects replace the instance's of each rule and
// hour they name (other instances write other rows).
func (c *Catalog) WriteUsage(ctx context.Context, b usage.Batch) error {
	rows := b.Rows
	if len(rows) == 0 && len(b.Top) == 0 && len(b.Gaps) == 0 {
		return nil
	}
	tx, err := c.write.BeginTx(ctx, nil)
	if err != nil {
		return fail("store usage", c.markReadOnly(err))
	}
	defer tx.Rollback()
	named := slices.Clone(rows)
	for _, t := range b.Top {
		named = append(named, usage.Row{Namespace: t.Namespace, Rule: t.Rule})
	}
	for _, g := range b.Gaps {
		named = append(named, usage.Row{Namespace: g.Namespace, Rule: g.Rule})
	}
	ids, created, err := c.usageSeriesIDs(ctx, tx, named)
	if err != nil {
		return fail("store usage", c.markReadOnly(err))
	}
	for _, t := range usageTables {
		step := int64(t.step.Duration() / time.Minute)
		sums := make(map[usagePeriod]*usageCounts)
		for _, r := range rows {
			k := usagePeriod{ids[usageSeries{r.Namespace, r.Rule}], r.Start.Unix() / 60 / step * step}
			if sums[k] == nil {
				sums[k] = new(usageCounts)
			}
			sums[k].add(r)
		}
		keys := make([]usagePeriod, 0, len(sums))
		for k := range sums {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b usagePeriod) int {
			return cmp.Or(cmp.Compare(a.series, b.series), cmp.Compare(a.start, b.start))
		})
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO `+t.name+`
			(series, start, allowed, denied, shadow_denied, degraded, shed, units)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (series, start) DO UPDATE SET
			allowed = `+t.name+`.allowed + excluded.allowed,
			denied = `+t.name+`.denied + excluded.denied,
			shadow_denied = `+t.name+`.shadow_denied + excluded.shadow_denied,
			degraded = `+t.name+`.degraded + excluded.degraded,
			shed = `+t.name+`.shed + excluded.shed,
			units = `+t.name+`.units + excluded.units`)
		if err != nil {
			return fail("store usage", err)
		}
		for _, k := range keys {
			v := sums[k]
			if _, err := stmt.ExecContext(ctx, k.series, k.start, v[0], v[1], v[2], v[3], v[4], v[5]); err != nil {
				stmt.Close()
				return fail("store usage", c.markReadOnly(err))
			}
		}
		stmt.Close()
	}
	if err := c.writeTop(ctx, tx, ids, b); err != nil {
		return fail("store usage", c.markReadOnly(err))
	}
	for _, g := range b.Gaps {
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage_gaps (series, start, stop) VALUES ($1, $2, $3)`,
			ids[usageSeries{g.Namespace, g.Rule}], g.From.Unix()/60, (g.To.Unix()+59)/60); err != nil {
			return fail("store usage", c.markReadOnly(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fail("store usage", c.markReadOnly(err))
	}
	c.usageSeries.put(created)
	return nil
}

// writeTop replaces b.Instance's top subjects of each rule and hour in b.
func (c *Catalog) writeTop(ctx context.Context, tx *sql.Tx, ids map[usageSeries]int64, b usage.Batch) error {
	if len(b.Top) == 0 {
		return nil
	}
	if b.Instance == "" {
		return fmt.Errorf("top subjects need the name of the instance that counted them: %w", sluice.ErrInvalid)
	}
	cleared := make(map[usagePeriod]bool)
	for _, t := range b.Top {
		k := usagePeriod{ids[usageSeries{t.Namespace, t.Rule}], t.Hour.Unix() / 60}
		if !cleared[k] {
			cleared[k] = true
			if _, err := tx.ExecContext(ctx, `DELETE FROM usage_top WHERE series = $1 AND start = $2 AND instance = $3`,
				k.series, k.start, b.Instance); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO usage_top (series, start, instance, subject, denied, units)
			VALUES ($1, $2, $3, $4, $5, $6)`, k.series, k.start, b.Instance, t.Subject, t.Denied, t.Units); err != nil {
			return err
		}
	}
	return nil
}

// usageSeriesIDs returns the id of every series of rows, creating those
// not stored yet inside tx; created holds the ones not cached before, to be
// cached once tx commits.
func (c *Catalog) usageSeriesIDs(ctx context.Context, tx *sql.Tx, rows []usage.Row) (ids, created map[usageSeries]int64, err error) {
	ids = make(map[usageSeries]int64)
	var missing []usageSeries
	for _, r := range rows {
		k := usageSeries{r.Namespace, r.Rule}
		if _, seen := ids[k]; seen {
			continue
		}
		id, ok := c.usageSeries.get(k)
		ids[k] = id
		if !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return ids, nil, nil
	}
	slices.SortFunc(missing, func(a, b usageSeries) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.rule, b.rule))
	})
	created = make(map[usageSeries]int64, len(missing))
	for _, k := range missing {
		// DO UPDATE (a no-op) rather than DO NOTHING, so that RETURNING
		// answers for a series another instance created first.
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO usage_series (namespace, rule) VALUES ($1, $2)
			ON CONFLICT (namespace, rule) DO UPDATE SET rule = excluded.rule RETURNING id`, k.namespace, k.rule).Scan(&id); err != nil {
			return nil, nil, err
		}
		ids[k], created[k] = id, id
	}
	return ids, created, nil
}

// ReadUsage returns the stored rollups q selects, oldest first.
func (c *Catalog) ReadUsage(ctx context.Context, q usage.Query) ([]usage.Row, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("read usage: %s: %w", err.Error(), sluice.ErrInvalid)
	}
	from, to := q.Bounds()
	rows, err := c.read.QueryContext(ctx, `SELECT s.rule, u.start, u.allowed, u.denied, u.shadow_denied, u.degraded, u.shed, u.units
		FROM `+usageTable(q.Step)+` u JOIN usage_series s ON s.id = u.series
		WHERE s.namespace = $1 AND ($2 = '' OR s.rule = $2) AND u.start >= $3 AND u.start < $4
		ORDER BY u.start, s.rule`+c.dialect.ByteOrder, q.Namespace, q.Rule, from.Unix()/60, to.Unix()/60)
	if err != nil {
		return nil, fail("read usage", err)
	}
	defer rows.Close()
	var out []usage.Row
	for rows.Next() {
		r := usage.Row{Namespace: q.Namespace}
		var start int64
		if err := rows.Scan(&r.Rule, &start, &r.Allowed, &r.Denied, &r.ShadowDenied, &r.Degraded, &r.Shed, &r.Units); err != nil {
			return nil, fail("read usage", err)
		}
		r.Start = time.Unix(start*60, 0).UTC()
		out = append(out, r)
	}
	return out, fail("read usage", rows.Err())
}

// ReadTop returns the heaviest subjects q selects, summed over the hours
// and instances that counted them.
func (c *Catalog) ReadTop(ctx context.Context, q usage.TopQuery) ([]usage.TopSubject, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("read top subjects: %s: %w", err.Error(), sluice.ErrInvalid)
	}
	from, to := q.Bounds()
	rank := "SUM(t.denied)"
	if q.By == usage.ByUnits {
		rank = "SUM(t.units)"
	}
	rows, err := c.read.QueryContext(ctx, `SELECT s.rule, t.subject, SUM(t.denied), SUM(t.units)
		FROM usage_top t JOIN usage_series s ON s.id = t.series
		WHERE s.namespace = $1 AND ($2 = '' OR s.rule = $2) AND t.start >= $3 AND t.start < $4
		GROUP BY s.rule, t.subject HAVING `+rank+` > 0
		ORDER BY `+rank+` DESC, s.rule`+c.dialect.ByteOrder+`, t.subject`+c.dialect.ByteOrder+` LIMIT $5`,
		q.Namespace, q.Rule, from.Unix()/60, to.Unix()/60, q.Limit)
	return collectFail("read top subjects", rows, err, func(r scanner) (usage.TopSubject, error) {
		var t usage.TopSubject
		return t, r.Scan(&t.Rule, &t.Subject, &t.Denied, &t.Units)
	})
}

func collectFail[T any](what string, rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	out, err := collect(rows, err, scan)
	return out, fail(what, err)
}

// ReadGaps returns the dropped ranges that overlap q's range, oldest first,
// overlapping ones of a rule merged.
func (c *Catalog) ReadGaps(ctx context.Context, q usage.Query) ([]usage.Gap, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("read usage gaps: %s: %w", err.Error(), sluice.ErrInvalid)
	}
	from, to := q.Bounds()
	rows, err := c.read.QueryContext(ctx, `SELECT s.rule, g.start, g.stop
		FROM usage_gaps g JOIN usage_series s ON s.id = g.series
		WHERE s.namespace = $1 AND ($2 = '' OR s.rule = $2) AND g.start < $4 AND g.stop > $3
		ORDER BY s.rule`+c.dialect.ByteOrder+`, g.start`, q.Namespace, q.Rule, from.Unix()/60, to.Unix()/60)
	gaps, err := collectFail("read usage gaps", rows, err, func(r scanner) (usage.Gap, error) {
		g := usage.Gap{Namespace: q.Namespace}
		var start, stop int64
		err := r.Scan(&g.Rule, &start, &stop)
		g.From, g.To = time.Unix(start*60, 0).UTC(), time.Unix(stop*60, 0).UTC()
		return g, err
	})
	if err != nil {
		return nil, err
	}
	var out []usage.Gap
	for _, g := range gaps {
		if n := len(out); n > 0 && out[n-1].Rule == g.Rule && !g.From.After(out[n-1].To) {
			if g.To.After(out[n-1].To) {
				out[n-1].To = g.To
			}
			continue
		}
		out = append(out, g)
	}
	slices.SortStableFunc(out, func(a, b usage.Gap) int { return a.From.Compare(b.From) })
	return out, nil
}

// PruneUsage deletes the stored minutes and top subjects that start before
// before, and the hours and days older than usage.HoursKept and
// usage.DaysKept (or than before, if that is older still), at most about
// limit rows a call (a top subjects' hour goes whole), and
// returns how many it deleted. Each statement deletes one series' oldest
// rows along its primary key, so no index on time alone is needed.
func (c *Catalog) PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("prune usage rollups: batch size must be positive, got %d: %w", limit, sluice.ErrInvalid)
	}
	now := c.now()
	cutoffs := map[string]time.Time{
		"usage_by_minute": before,
		"usage_by_hour":   earlier(before, now.Add(-usage.HoursKept)),
		"usage_by_day":    earlier(before, now.Add(-usage.DaysKept)),
		"usage_top":       before,
		"usage_gaps":      before,
	}
	series, err := c.read.QueryContext(ctx, `SELECT id FROM usage_series ORDER BY id`)
	ids, err := collect(series, err, func(r scanner) (int64, error) {
		var id int64
		return id, r.Scan(&id)
	})
	if err != nil {
		return 0, fail("prune usage rollups", err)
	}
	var deleted int64
	for _, id := range ids {
		for _, table := range []string{"usage_by_minute", "usage_by_hour", "usage_by_day", "usage_top", "usage_gaps"} {
			left := int64(limit) - deleted
			if left <= 0 {
				return deleted, nil
			}
			res, err := c.write.ExecContext(ctx, `DELETE FROM `+table+` WHERE series = $1 AND start IN
				(SELECT start FROM `+table+` WHERE series = $1 AND start < $2 ORDER BY start LIMIT $3)`,
				id, cutoffs[table].Unix()/60, left)
			if err != nil {
				return deleted, fail("prune usage rollups", c.markReadOnly(err))
			}
			n, err := res.RowsAffected()
			if err != nil {
				return deleted, fail("prune usage rollups", err)
			}
			deleted += n
		}
	}
	return deleted, nil
}

// RunUsageRetention deletes the stored minutes older than retention (and
// hours and days past what they are kept for), in the background of a
// serving process, until ctx ends.
func (c *Catalog) RunUsageRetention(ctx context.Context, retention time.Duration, log *slog.Logger) {
	runRetention(ctx, "usage rollups", "rows", retention, c.PruneUsage, log)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
