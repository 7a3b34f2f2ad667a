package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/testenv"
)

func TestStartGate(t *testing.T) {
	gate := httpapi.NewStartGate(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		gate.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	if rec := get("/healthz"); rec.Code != http.StatusOK {
		t.Fatalf("/healthz while starting: %d, want 200 (the process is up)", rec.Code)
	}
	rec := get("/readyz")
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable ||
		body.Error.Code != "starting" || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("/readyz while starting: %d %s, want 503 starting with Retry-After", rec.Code, rec.Body)
	}

	// While it waits, every answer says for what.
	started := make(chan struct{})
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- gate.WaitFor(ctx, slog.New(slog.DiscardHandler), "the catalog database", func(error) bool { return true },
			func(context.Context) error {
				select {
				case <-started:
				default:
					close(started)
				}
				return errors.New("connection refused")
			})
	}()
	<-started
	testenv.Eventually(t, 10*time.Second, "the wait said on /readyz", func() bool {
		return strings.Contains(get("/readyz").Body.String(), "waiting for the catalog database to answer")
	})
	cancel()
	if err := <-done; !errors.Is(err, httpapi.ErrStoppedStarting) {
		t.Fatalf("WaitFor after ctx ended: %v, want ErrStoppedStarting", err)
	}

	gate.Open()
	if rec := get("/readyz"); rec.Code != http.StatusTeapot {
		t.Fatalf("open gate: %d, want the service's answer", rec.Code)
	}
}

func TestWaitFor(t *testing.T) {
	refused := errors.New("connection refused")
	t.Run("retries_until_the_step_succeeds", func(t *testing.T) {
		var logs testenv.Buffer
		attempts := 0
		err := httpapi.NewStartGate(nil).WaitFor(context.Background(), slog.New(slog.NewJSONHandler(&logs, nil)), "the catalog database",
			func(err error) bool { return errors.Is(err, refused) },
			func(context.Context) error {
				if attempts++; attempts < 3 {
					return refused
				}
				return nil
			})
		if err != nil || attempts != 3 {
			t.Fatalf("%v after %d attempts, want success on the third", err, attempts)
		}
		if !strings.Contains(logs.String(), "waiting for the catalog database to answer") || !strings.Contains(logs.String(), "answered; starting") {
			t.Fatalf("the wait and its end were not logged:\n%s", logs.String())
		}
	})
	t.Run("an_error_retry_refuses_ends_the_wait", func(t *testing.T) {
		bad := errors.New("password authentication failed")
		attempts := 0
		err := httpapi.NewStartGate(nil).WaitFor(context.Background(), slog.New(slog.DiscardHandler), "the catalog database",
			func(err error) bool { return errors.Is(err, refused) },
			func(context.Context) error { attempts++; return bad })
		if !errors.Is(err, bad) || attempts != 1 {
			t.Fatalf("%v after %d attempts, want the error at once", err, attempts)
		}
	})
}
