package check

import (
	"sync/atomic"

	"github.com/sluicelabs/sluice/metrics"
)

// Observer is told of every decision the engine counts: the labels its rule
// is counted under, the subject, and the outcome. It runs on the check path,
// after the decision, so it must be quick and safe for concurrent use. What
// is not counted is not observed either: checks on a Rule not made by
// NewRule (such as the admin API's cost-0 peeks), and every check of an
// Engine without Metrics.
type Observer func(labels metrics.Labels, subject string, outcome Outcome)

// engineObserver is the Engine's Observer, kept outside the Engine struct so
// an unset observer costs one atomic load per check.
type engineObserver struct{ fn atomic.Pointer[Observer] }

// SetObserver makes o see every later decision (nil stops it). One observer
// at a time: the web console's live view.
func (e *Engine) SetObserver(o Observer) {
	if o == nil {
		e.observer.fn.Store(nil)
		return
	}
	e.observer.fn.Store(&o)
}
