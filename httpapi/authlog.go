package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/sluicelabs/sluice/internal/accesslog"
)

// authFailureLog logs failed authentications, rate-limited by an
// accesslog.Throttle. Records say what was presented (which header, not its
// value) and from where; the secret, its hash or any part of them never
// reach the log.
type authFailureLog struct {
	log      *slog.Logger
	throttle *accesslog.Throttle
}

func newAuthFailureLog(log *slog.Logger) *authFailureLog {
	return &authFailureLog{log: log, throttle: accesslog.NewThrottle()}
}

// record logs a failed authentication of r, answered with code, unless the
// window's records are spent; the next record logged says how many were
// left out.
func (l *authFailureLog) record(r *http.Request, api, code string) {
	ok, suppressed := l.throttle.Allow()
	if !ok {
		return
	}
	l.log.Warn("authentication failed",
		"api", api,
		"reason", code,
		"credential", credentialKind(r),
		"method", r.Method,
		"route", r.Pattern,
		"remote", accesslog.PeerIP(r),
		"suppressed_before", suppressed,
	)
}

// credentialKind names where the caller put its credential, never what.
func credentialKind(r *http.Request) string {
	switch {
	case firstValue(r.Header, "X-Api-Key") != "":
		return "x-api-key"
	case firstValue(r.Header, "Authorization") != "":
		return "authorization"
	}
	return "none"
}
