package middleware

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sluicelabs/sluice"
)

// Problem is an RFC 9457 problem details body, as the middleware and gateway
// write it.
type Problem struct {
	// Type is "about:blank": the status code says what happened.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// RetryAfterMs is the exact wait in milliseconds before the same request
	// would be allowed (the Retry-After header is the same, rounded up to
	// seconds); 0 when not a rate-limit denial.
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// WriteProblem answers with status and an application/problem+json body.
// Headers already set on w (rate-limit headers, Retry-After) are kept.
func WriteProblem(w http.ResponseWriter, status int, detail string, retryAfter time.Duration) {
	body, _ := json.Marshal(Problem{
		Type:         "about:blank",
		Title:        http.StatusText(status),
		Status:       status,
		Detail:       detail,
		RetryAfterMs: sluice.CeilMilliseconds(retryAfter),
	})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
