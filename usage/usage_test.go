package usage_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	"github.com/sluicelabs/sluice/postgres"
	"github.com/sluicelabs/sluice/sqlite"
	"github.com/sluicelabs/sluice/usage"
)

// store is what the tests need of a catalog: migrate, add and read usage.
type store interface {
	Migrate(ctx context.Context) error
	usage.Writer
	usage.Reader
	AddUsage(ctx context.Context, rows []usage.Row) error
	PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error)
	Close() error
}

// dialects open instances of one database of each kind; each call is
// another instance, as another process would be.
func dialects(t *testing.T) map[string]func(t *testing.T) store {
	dir := t.TempDir()
	var pgDSN string
	var once sync.Once
	return map[string]func(t *testing.T) store{
		"sqlite": func(t *testing.T) store {
			c, err := sqlite.Open(t.Context(), filepath.Join(dir, "catalog.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		},
		"postgres": func(t *testing.T) store {
			once.Do(func() { pgDSN = testenv.Postgres(t) })
			c, err := postgres.Open(t.Context(), pgDSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
}

// minutes reads the stored minutes of [from, to).
func readMinutes(t *testing.T, c usage.Reader, namespace, rule string, from, to time.Time) ([]usage.Row, error) {
	return c.ReadUsage(t.Context(), usage.Query{Namespace: namespace, Rule: rule, Step: usage.StepMinute, From: from, To: to})
}

func hourly(n int64) []sluice.Limit {
	return []sluice.Limit{sluice.FixedWindow(n, time.Hour).Named("hour")}
}

// TestExactSumsAcrossInstances: three engines, each with its own Recorder
// and catalog instance, check one known load against one shared store; the
// database's rows are the exact sums of the load, per rule and outcome.
func TestExactSumsAcrossInstances(t *testing.T) {
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			shared := memory.New(memory.Options{})
			t.Cleanup(func() { shared.Close() })
			const (
				instances = 3
				limit     = 7  // per subject and hour
				perEngine = 10 // checks per subject and engine
				subjects  = 4
				cost      = 2
			)
			minute := time.Date(2026, 12, 2, 12, 30, 0, 0, time.UTC)
			var wg sync.WaitGroup
			for i := range instances {
				cat := open(t)
				if err := cat.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				rec := usage.NewRecorder(usage.Options{})
				e := check.New(shared, check.Options{Usage: rec})
				t.Cleanup(func() { e.Close() })
				enforced := e.NewRule(metrics.Labels{Tenant: "acme", Rule: "api"}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(limit * cost)})
				shadow := e.NewRule(metrics.Labels{Tenant: "acme", Rule: "trial"}, check.Rule{Namespace: "acme", Name: "trial", Limits: hourly(limit * cost), Shadow: true})
				wg.Add(1)
				go func() {
					defer wg.Done()
					for s := range subjects {
						for range perEngine {
							for _, r := range []*check.Rule{enforced, shadow} {
								if _, err := e.Check(ctx, check.Query{Rule: r, Subject: fmt.Sprint("user-", s), Cost: cost}); err != nil {
									t.Errorf("instance %d: %v", i, err)
								}
							}
						}
					}
					rec.Roll(minute)
					if err := rec.Flush(ctx, cat); err != nil {
						t.Errorf("instance %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			rows, err := readMinutes(t, open(t), "acme", "", minute, minute.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			total := int64(instances * perEngine * subjects)
			allowed := int64(limit * subjects)
			want := []usage.Row{
				{Namespace: "acme", Rule: "api", Start: minute, Allowed: allowed, Denied: total - allowed, Units: allowed * cost},
				{Namespace: "acme", Rule: "trial", Start: minute, Allowed: allowed, ShadowDenied: total - allowed, Units: allowed * cost},
			}
			if fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Errorf("stored rollups:\n got %v\nwant %v", rows, want)
			}
		})
	}
}

// TestOutageDropsOnlyPastTheBound: while the database cannot be written,
// every check is still answered, rolls wait in the buffer up to MaxRows,
// the oldest past it are dropped and counted, and the rest land once a
// database is back.
func TestOutageDropsOnlyPastTheBound(t *testing.T) {
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			dead := open(t)
			if err := dead.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			dead.Close() // the outage: every write fails
			const maxRows, minutes = 5, 8
			rec := usage.NewRecorder(usage.Options{MaxRows: maxRows})
			m := memory.New(memory.Options{})
			t.Cleanup(func() { m.Close() })
			e := check.New(m, check.Options{Usage: rec})
			t.Cleanup(func() { e.Close() })
			r := e.NewRule(metrics.Labels{Tenant: "acme", Rule: "api"}, check.Rule{Namespace: "acme", Name: "api", Limits: hourly(1000)})
			start := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
			for i := range minutes {
				for range i + 1 { // minute i has i+1 checks
					res, err := e.Check(ctx, check.Query{Rule: r, Subject: "u", Cost: 1})
					if err != nil || !res.Pass() {
						t.Fatalf("check during the outage: %v, %v", res, err)
					}
				}
				rec.Roll(start.Add(time.Duration(i) * time.Minute))
				if err := rec.Flush(ctx, dead); err == nil {
					t.Fatal("flush to a closed database succeeded")
				}
			}
			if got := rec.Dropped(); got != minutes-maxRows {
				t.Errorf("dropped %d rows, want %d", got, minutes-maxRows)
			}
			back := open(t)
			if err := rec.Flush(ctx, back); err != nil {
				t.Fatal(err)
			}
			rows, err := readMinutes(t, back, "acme", "api", start, start.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != maxRows {
				t.Fatalf("stored %d minutes, want the newest %d: %v", len(rows), maxRows, rows)
			}
			for j, row := range rows {
				i := minutes - maxRows + j
				if !row.Start.Equal(start.Add(time.Duration(i)*time.Minute)) || row.Allowed != int64(i+1) {
					t.Errorf("row %d: %v, want minute %d with %d allowed", j, row, i, i+1)
				}
			}
			// The dropped minutes are stored as a gap, so charts show one.
			gaps, err := back.ReadGaps(ctx, usage.Query{Namespace: "acme", Step: usage.StepMinute, From: start, To: start.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			want := []usage.Gap{{Namespace: "acme", Rule: "api", From: start, To: start.Add((minutes - maxRows) * time.Minute)}}
			if fmt.Sprint(gaps) != fmt.Sprint(want) {
				t.Errorf("gaps %v, want %v", gaps, want)
			}
		})
	}
}

// TestUsageRefusesBadRange: a query with from not before to is refused.
func TestUsageRefusesBadRange(t *testing.T) {
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			c := open(t)
			if err := c.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if _, err := readMinutes(t, c, "acme", "", now, now); err == nil {
				t.Error("empty range accepted")
			}
			if _, err := readMinutes(t, c, "", "", now, now.Add(time.Hour)); err == nil {
				t.Error("missing namespace accepted")
			}
		})
	}
}

// TestPruneUsageDeletesOnlyOlderMinutes: retention deletes the minutes
// before its bound, of every namespace and rule, in batches, and keeps the
// rest whole.
func TestPruneUsageDeletesOnlyOlderMinutes(t *testing.T) {
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			c := open(t)
			if err := c.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			ns := "prune-" + name
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var rows []usage.Row
			for i := range 10 {
				for _, rule := range []string{"a", "b"} {
					rows = append(rows, usage.Row{Namespace: ns, Rule: rule, Start: base.Add(time.Duration(i) * time.Minute), Allowed: int64(i + 1)})
				}
			}
			if err := c.AddUsage(t.Context(), rows); err != nil {
				t.Fatal(err)
			}
			if _, err := c.PruneUsage(t.Context(), base, 0); err == nil {
				t.Error("a batch of 0 accepted")
			}
			// Minutes 0-5 go, in batches of at most 2 rows; their hour and day
			// (kept far longer) stay.
			bound := base.Add(6 * time.Minute)
			var deleted int64
			for range 10 {
				n, err := c.PruneUsage(t.Context(), bound, 2)
				if err != nil {
					t.Fatal(err)
				}
				if n > 2 {
					t.Fatalf("one batch of 2 rows deleted %d", n)
				}
				deleted += n
				if n == 0 {
					break
				}
			}
			if deleted != 12 {
				t.Errorf("deleted %d rows, want the 12 of minutes 0-5", deleted)
			}
			left, err := readMinutes(t, c, ns, "", base, base.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 8 || !left[0].Start.Equal(bound) || left[0].Allowed != 7 {
				t.Fatalf("left %+v, want minutes 6-9 of both rules", left)
			}
		})
	}
}

// TestCountingDoesNotAllocate: the check path's part is allocation-free.
func TestCountingDoesNotAllocate(t *testing.T) {
	c := usage.NewRecorder(usage.Options{}).Counters("acme", "api")
	if n := testing.AllocsPerRun(1000, func() { c.Add(usage.Allowed, 1) }); n != 0 {
		t.Errorf("Counters.Add allocates %v times per call", n)
	}
}

// BenchmarkCountersAdd: one add from every core at once on one rule.
func BenchmarkCountersAdd(b *testing.B) {
	c := usage.NewRecorder(usage.Options{}).Counters("acme", "api")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(usage.Allowed, 1)
		}
	})
}

// TestStepsAreExactSums: minutes written by two instances over three hours
// of two days read back at every step as the exact sums of their periods,
// and a query that spans too many periods, or names no step, is refused.
func TestStepsAreExactSums(t *testing.T) {
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			ns := "steps-" + name
			base := time.Date(2026, 3, 1, 22, 58, 0, 0, time.UTC) // 22:58, 23:xx, then 00:xx the next day
			var wantHours = map[time.Time]int64{}
			var wantDays = map[time.Time]int64{}
			var total int64
			for i := range 2 {
				c := open(t)
				if err := c.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				var rows []usage.Row
				for m := range 70 {
					start := base.Add(time.Duration(m) * time.Minute)
					n := int64(m + i + 1)
					rows = append(rows, usage.Row{Namespace: ns, Rule: "api", Start: start, Allowed: n, Denied: 1, Units: 2 * n})
					wantHours[start.Truncate(time.Hour)] += n
					wantDays[start.Truncate(24*time.Hour)] += n
					total += n
				}
				if err := c.AddUsage(ctx, rows); err != nil {
					t.Fatal(err)
				}
			}
			c := open(t)
			for step, want := range map[usage.Step]map[time.Time]int64{usage.StepHour: wantHours, usage.StepDay: wantDays} {
				rows, err := c.ReadUsage(ctx, usage.Query{Namespace: ns, Rule: "api", Step: step, From: base, To: base.Add(70 * time.Minute)})
				if err != nil {
					t.Fatal(err)
				}
				var sum int64
				for _, r := range rows {
					if r.Allowed != want[r.Start] || r.Units != 2*r.Allowed || r.Rule != "api" {
						t.Errorf("%s %s: %+v, want allowed %d", step, r.Start, r, want[r.Start])
					}
					sum += r.Allowed
				}
				if len(rows) != len(want) || sum != total {
					t.Errorf("%s: %d rows summing %d, want %d summing %d", step, len(rows), sum, len(want), total)
				}
			}
			for _, q := range []usage.Query{
				{Namespace: ns, Step: usage.StepMinute, From: base, To: base.Add(8 * 24 * time.Hour)},
				{Namespace: ns, Step: "week", From: base, To: base.Add(time.Hour)},
			} {
				if _, err := c.ReadUsage(ctx, q); !errors.Is(err, sluice.ErrInvalid) {
					t.Errorf("%+v: got %v, want an invalid query", q, err)
				}
			}
		})
	}
}

// TestTopSubjects: three instances' engines count a load whose heavy
// subjects the test knows, among many light ones; the stored top subjects
// rank them first with their exact sums across instances, a second flush
// in the hour replaces an instance's figures rather than adding to them,
// and the next hour starts from nothing.
func TestTopSubjects(t *testing.T) {
	for name, open := range dialects(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			ns := "top-" + name
			shared := memory.New(memory.Options{})
			t.Cleanup(func() { shared.Close() })
			hour := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
			const instances = 3
			type instance struct {
				rec  *usage.Recorder
				e    *check.Engine
				rule *check.Rule
				cat  store
			}
			var all []instance
			for range instances {
				cat := open(t)
				if err := cat.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				rec := usage.NewRecorder(usage.Options{})
				e := check.New(shared, check.Options{Usage: rec})
				t.Cleanup(func() { e.Close() })
				// 5 per subject per hour: "hot" and "warm" go over.
				r := e.NewRule(metrics.Labels{Tenant: ns, Rule: "api"}, check.Rule{Namespace: ns, Name: "api", Limits: hourly(5)})
				all = append(all, instance{rec, e, r, cat})
			}
			next := 0 // round robin over the instances, across calls
			run := func(subject string, n int) {
				for range n {
					in := all[next%instances]
					next++
					if _, err := in.e.Check(ctx, check.Query{Rule: in.rule, Subject: subject, Cost: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
			run("hot", 300)  // 5 allowed, 295 denied
			run("warm", 105) // 5 allowed, 100 denied
			// Allowed once each: fewer per instance and shard than a shard
			// holds, so every count is exact.
			for i := range 200 {
				run(fmt.Sprint("light-", i), 1)
			}
			flush := func(minute time.Time) {
				for _, in := range all {
					in.rec.Roll(minute)
					if err := in.rec.Flush(ctx, in.cat); err != nil {
						t.Fatal(err)
					}
				}
			}
			top := func(by usage.By, from time.Time) []usage.TopSubject {
				got, err := all[0].cat.ReadTop(ctx, usage.TopQuery{Namespace: ns, By: by, From: from, To: from.Add(time.Hour), Limit: 3})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			flush(hour.Add(10 * time.Minute))
			run("hot", 30) // 30 more denials, later in the hour
			flush(hour.Add(11 * time.Minute))
			want := "[{api hot 325 5} {api warm 100 5}]"
			if got := fmt.Sprint(top(usage.ByDenied, hour)); got != want {
				t.Errorf("top by denials: %s, want %s", got, want)
			}
			if got := fmt.Sprint(top(usage.ByUnits, hour)); got != "[{api hot 325 5} {api warm 100 5} {api light-0 0 1}]" {
				t.Errorf("top by units: %s, want hot and warm first at 5", got)
			}
			// The hour's last minute ends it; the next starts from nothing.
			flush(hour.Add(59 * time.Minute))
			run("warm", 3) // denied
			flush(hour.Add(61 * time.Minute))
			if got := fmt.Sprint(top(usage.ByDenied, hour.Add(time.Hour))); got != "[{api warm 3 0}]" {
				t.Errorf("the next hour: %s", got)
			}
			if got := fmt.Sprint(top(usage.ByDenied, hour)); got != want {
				t.Errorf("the hour after it ended: %s, want %s", got, want)
			}
			if _, err := all[0].cat.ReadTop(ctx, usage.TopQuery{Namespace: ns, By: "errors", From: hour, To: hour.Add(time.Hour), Limit: 3}); !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("by errors: %v", err)
			}
		})
	}
}

// TestTopSubjectsDoNotAllocate: counting a subject allocates nothing once
// the rule's hour has its sketch, whether the subject is new or known.
func TestTopSubjectsDoNotAllocate(t *testing.T) {
	c := usage.NewRecorder(usage.Options{}).Counters("acme", "api")
	c.Subject("first", true, 0)
	subjects := make([]string, 1000)
	for i := range subjects {
		subjects[i] = fmt.Sprint("user-", i)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() { c.Subject(subjects[i%len(subjects)], i%2 == 0, 3); i++ }); n != 0 {
		t.Errorf("Counters.Subject allocates %v times per call", n)
	}
}

// BenchmarkCountersSubject: one subject counted from every core at once on
// one rule, among 10,000 subjects.
func BenchmarkCountersSubject(b *testing.B) {
	c := usage.NewRecorder(usage.Options{}).Counters("acme", "api")
	subjects := make([]string, 10000)
	for i := range subjects {
		subjects[i] = fmt.Sprint("user-", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Subject(subjects[i%len(subjects)], false, 1)
			i++
		}
	})
}

// memWriter keeps every batch written, summing rows per namespace and rule.
type memWriter struct {
	mu      sync.Mutex
	allowed map[string]int64
	batches int
}

func (m *memWriter) WriteUsage(_ context.Context, b usage.Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range b.Rows {
		m.allowed[r.Rule] += r.Allowed
	}
	m.batches++
	return nil
}

func (m *memWriter) sum(rule string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allowed[rule]
}

// TestRunStoresWithinOneFlush: Run writes what was counted within a flush
// interval, before its minute ends, and adds later counts of the same
// minute without counting any twice; stopping it writes the rest.
func TestRunStoresWithinOneFlush(t *testing.T) {
	rec := usage.NewRecorder(usage.Options{})
	c := rec.Counters("acme", "api")
	w := &memWriter{allowed: map[string]int64{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx, w, 20*time.Millisecond, nil) }()
	c.Add(usage.Allowed, 3)
	deadline := time.Now().Add(10 * time.Second)
	for w.sum("api") != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s of 20 ms flushes, %d of 3 stored", w.sum("api"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Add(usage.Allowed, 4)
	for w.sum("api") != 7 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 7 stored", w.sum("api"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Add(usage.Allowed, 5)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := w.sum("api"); got != 12 {
		t.Errorf("after Run ended: %d stored, want 12", got)
	}
}
