package httpapi

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Failed authentications are logged at most authLogBurst times per
// authLogWindow: enough to see who is knocking, never a log flood an
// attacker controls.
const (
	authLogBurst  = 10
	authLogWindow = 10 * time.Second
)

// authFailureLog logs failed authentications, rate-limited. Records say
// what was presented (which header, not its value) and from where; the
// secret, its hash or any part of them never reach the log.
type authFailureLog struct {
	log *slog.Logger
	now func() time.Time

	mu          sync.Mutex
	windowStart time.Time
	logged      int
	suppressed  int
}

func newAuthFailureLog(log *slog.Logger) *authFailureLog {
	return &authFailureLog{log: log, now: time.Now}
}

// record logs a failed authentication of r, answered with code, unless the
// window's records are spent; the next record logged says how many were
// left out.
func (l *authFailureLog) record(r *http.Request, api, code string) {
	l.mu.Lock()
	now := l.now()
	if now.Sub(l.windowStart) >= authLogWindow {
		l.windowStart, l.logged = now, 0
	}
	if l.logged >= authLogBurst {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.logged++
	suppressed := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()

	l.log.Warn("authentication failed",
		"api", api,
		"reason", code,
		"credential", credentialKind(r),
		"method", r.Method,
		"route", r.Pattern,
		"remote", remoteIP(r),
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

// remoteIP is the connection's peer address without its port.
func remoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
