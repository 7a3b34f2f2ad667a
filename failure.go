package sluice

// FailureMode says what to do with a check when the store cannot answer.
type FailureMode string

const (
	// FailClosed denies: the service answers 503 with Retry-After.
	FailClosed FailureMode = "closed"
	// FailOpen allows and marks the answer degraded.
	FailOpen FailureMode = "open"
	// FailLocal falls back to an in-process limiter, so each instance still
	// enforces the limit on its own share of the traffic.
	FailLocal FailureMode = "local"
)

// Valid reports whether m is a known failure mode.
func (m FailureMode) Valid() bool {
	return m == FailClosed || m == FailOpen || m == FailLocal
}

// Describe names m for people: a rule without a failure mode of its own
// has the serving instance's default.
func (m FailureMode) Describe() string {
	if m == "" {
		return "the server's default"
	}
	return string(m)
}
