package loadgen

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// Report is one measured run, as sluice bench prints it (a table row, or
// JSON).
type Report struct {
	Target     string  `json:"target"`
	Model      string  `json:"model"`
	Seconds    float64 `json:"seconds"`
	Sent       int64   `json:"sent"`
	Allowed    int64   `json:"allowed"`
	Denied     int64   `json:"denied"`
	Shed       int64   `json:"shed"`
	Failed     int64   `json:"failed"`
	Late       int64   `json:"late"`
	Dropped    int64   `json:"dropped"`
	PerSecond  float64 `json:"per_second"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	ShedP50Ms  float64 `json:"shed_p50_ms,omitempty"`
	ShedP99Ms  float64 `json:"shed_p99_ms,omitempty"`
	FirstError string  `json:"first_error,omitempty"`
	// CPUSeconds and CPUMicrosPerCheck are absent when CPU was not measured;
	// CPUError then says why, unless it was not asked for.
	CPUSeconds        *float64 `json:"cpu_seconds,omitempty"`
	CPUMicrosPerCheck *float64 `json:"cpu_us_per_check,omitempty"`
	CPUError          string   `json:"cpu_error,omitempty"`
	// AllowedBySecond is Result.AllowedBySecond: allowed requests by the
	// Unix second they were sent in and the one they were answered in.
	AllowedBySecond []SecondCount `json:"allowed_by_second,omitempty"`
	// AllowedByWindow and Unplaced are Result's: allowed requests by the
	// end of the window their decision named (Unix seconds), and those
	// that could not be placed in exactly one; absent when the target
	// does not report a decision's reset after.
	AllowedByWindow []WindowCount `json:"allowed_by_window,omitempty"`
	Unplaced        *int64        `json:"allowed_unplaced,omitempty"`
	// Mismatched is Result's: allowed requests within one second whose
	// decision named another window (present with AllowedByWindow).
	Mismatched *int64 `json:"allowed_window_mismatch,omitempty"`
}

// Ms is d in milliseconds, to the microsecond.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// NewReport is r as reported, under the target's name.
func NewReport(target string, r Result) Report {
	rep := Report{
		Target: target, Model: r.Model, Seconds: r.Elapsed.Seconds(),
		Sent: r.Sent, Allowed: r.Allowed, Denied: r.Denied, Shed: r.Shed, Failed: r.Errors, Late: r.Late, Dropped: r.Dropped,
		PerSecond: r.Throughput(),
		P50Ms:     Ms(r.Percentile(0.5)), P90Ms: Ms(r.Percentile(0.9)), P99Ms: Ms(r.Percentile(0.99)),
		P999Ms: Ms(r.Percentile(0.999)), MaxMs: Ms(r.Max()),
		ShedP50Ms: Ms(r.ShedPercentile(0.5)), ShedP99Ms: Ms(r.ShedPercentile(0.99)),
		AllowedBySecond: r.AllowedBySecond, AllowedByWindow: r.AllowedByWindow,
	}
	if r.AllowedByWindow != nil || r.Unplaced > 0 {
		n, m := r.Unplaced, r.Mismatched
		rep.Unplaced, rep.Mismatched = &n, &m
	}
	if r.FirstError != nil {
		rep.FirstError = r.FirstError.Error()
	}
	if r.CPUMeasured {
		sec := r.CPUSeconds
		rep.CPUSeconds = &sec
		if r.Answered() > 0 {
			us := float64(r.CPUPerAnswer().Nanoseconds()) / 1000
			rep.CPUMicrosPerCheck = &us
		}
	} else if r.CPUError != nil {
		rep.CPUError = r.CPUError.Error()
	}
	return rep
}

// cpuColumn is the CPU per check as printed: "-" when not measured.
func (r Report) cpuColumn() string {
	if r.CPUMicrosPerCheck == nil {
		return "-"
	}
	return strconv.FormatFloat(*r.CPUMicrosPerCheck, 'f', 1, 64)
}

// PrintReports prints reports as a table under header (the load, in
// words), with their notes, and with two reports the first's ratios to the
// second, its reference.
func PrintReports(out io.Writer, header string, reports []Report) {
	fmt.Fprintf(out, "%s\n\n", header)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tanswered/s\tallowed\tdenied\tshed\tfailed\tlate\tdropped\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tcpu µs/check\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t\n",
			r.Target, r.PerSecond, r.Allowed, r.Denied, r.Shed, r.Failed, r.Late, r.Dropped, r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs, r.cpuColumn())
	}
	tw.Flush()
	printNotes(out, reports)
	if len(reports) == 2 && reports[1].P50Ms > 0 && reports[1].PerSecond > 0 {
		fmt.Fprintf(out, "\ncheck / reference: p50 %.2f×, p99 %.2f×, throughput %.2f×",
			reports[0].P50Ms/reports[1].P50Ms, reports[0].P99Ms/max(reports[1].P99Ms, 0.001), reports[0].PerSecond/reports[1].PerSecond)
		if a, b := reports[0].CPUMicrosPerCheck, reports[1].CPUMicrosPerCheck; a != nil && b != nil && *b > 0 {
			fmt.Fprintf(out, ", CPU per check %.2f×", *a / *b)
		}
		fmt.Fprintln(out)
	}
}

// printNotes says why requests failed, how fast shedding answered, and why
// CPU was not measured.
func printNotes(out io.Writer, reports []Report) {
	for _, r := range reports {
		if r.Shed > 0 {
			fmt.Fprintf(out, "\n%s: %d shed as overloaded, answered in p50 %.3f ms, p99 %.3f ms\n", r.Target, r.Shed, r.ShedP50Ms, r.ShedP99Ms)
		}
		if r.FirstError != "" {
			fmt.Fprintf(out, "\n%s: %d failed; the first: %s\n", r.Target, r.Failed, r.FirstError)
		}
		if r.CPUError != "" {
			fmt.Fprintf(out, "\n%s: CPU per check not measured: %s\n", r.Target, r.CPUError)
		}
	}
}

// OverloadStep is one step of an overload search, as reported.
type OverloadStep struct {
	OfferedRate float64 `json:"offered_rate"`
	// Healthy: p99 under the p99 limit, nothing failed, shed or dropped.
	Healthy bool `json:"healthy"`
	// TwiceEdge marks the last step, at twice the edge.
	TwiceEdge bool `json:"twice_edge,omitempty"`
	Report
}

// OverloadReport is the result of an overload search, as reported.
type OverloadReport struct {
	Target string  `json:"target"`
	P99Ms  float64 `json:"p99_limit_ms"`
	// Edge is the highest healthy offered rate, 0 if the first step was not.
	Edge float64 `json:"edge"`
	// EdgeIsLowerBound: the maximum rate ended the search before a step failed.
	EdgeIsLowerBound bool           `json:"edge_is_lower_bound,omitempty"`
	Steps            []OverloadStep `json:"steps"`
}

// Verdict says how the step went, in a word or two.
func (s OverloadStep) Verdict() string {
	switch {
	case s.TwiceEdge && s.Healthy:
		return "2× edge, healthy"
	case s.TwiceEdge:
		return "2× edge"
	case s.Healthy:
		return "healthy"
	}
	return "past the edge"
}

// OverloadPrint is what PrintOverload says besides the report: its first
// line, and the search's bounds.
type OverloadPrint struct {
	Header             string
	StartRate, MaxRate float64
	P99                time.Duration
}

// PrintOverload prints an overload search as a table of its steps, their
// notes, and the edge found.
func PrintOverload(out io.Writer, rep OverloadReport, p OverloadPrint) {
	fmt.Fprintf(out, "%s\n\n", p.Header)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered/s\tserved/s\tallowed\tdenied\tshed\tfailed\tlate\tdropped\tp50 ms\tp99 ms\tcpu µs/check\tstep\t")
	reports := make([]Report, 0, len(rep.Steps))
	for _, s := range rep.Steps {
		fmt.Fprintf(tw, "%.0f\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t\n",
			s.OfferedRate, s.PerSecond, s.Allowed, s.Denied, s.Shed, s.Failed, s.Late, s.Dropped, s.P50Ms, s.P99Ms, s.cpuColumn(), s.Verdict())
		s.Target = fmt.Sprintf("step at %.0f/s", s.OfferedRate)
		reports = append(reports, s.Report)
	}
	tw.Flush()
	printNotes(out, reports)
	criteria := fmt.Sprintf("the highest offered rate with p99 under %v and no failed, shed or dropped requests", p.P99)
	switch {
	case rep.Edge == 0:
		fmt.Fprintf(out, "\nno edge found: the first step, at %.0f/s, was already past it (%s); start lower with --rate\n", p.StartRate, criteria)
	case rep.EdgeIsLowerBound:
		fmt.Fprintf(out, "\nedge: at least %.0f/s (%s); --max-rate %.0f/s ended the search first\n", rep.Edge, criteria, p.MaxRate)
	default:
		fmt.Fprintf(out, "\nedge: %.0f/s (%s)\n", rep.Edge, criteria)
	}
}
