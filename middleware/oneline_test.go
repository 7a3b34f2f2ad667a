package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/middleware"
)

// TestLimitByIP: the one-line middleware admits n requests per address and
// window, denies the next with 429 and a Retry-After, counts each address
// apart, and refuses a limit that is not positive by panicking with the
// reason.
func TestLimitByIP(t *testing.T) {
	h := middleware.LimitByIP(3, time.Hour)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	do := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 3 {
		if w := do("192.0.2.1:1234"); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i+1, w.Code)
		}
	}
	if w := do("192.0.2.1:5678"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("4th request from one address: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if w := do("192.0.2.2:1234"); w.Code != http.StatusOK {
		t.Fatalf("another address: %d", w.Code)
	}
	for _, bad := range []struct {
		n   int64
		per time.Duration
	}{{0, time.Minute}, {10, 0}} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "middleware.LimitByIP") {
					t.Errorf("LimitByIP(%d, %v): panic %q, want one naming the call and the reason", bad.n, bad.per, msg)
				}
			}()
			middleware.LimitByIP(bad.n, bad.per)
		}()
	}
}
