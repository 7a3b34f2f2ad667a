package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice/httpapi"
)

func TestNewServerAnswersUnknownPathsAsJSON(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ok", func(w http.ResponseWriter, _ *http.Request) {})
	srv := httpapi.NewServer(mux, slog.New(slog.DiscardHandler))
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 || srv.ErrorLog == nil {
		t.Fatalf("unbounded server: %+v", srv)
	}
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nope", nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("unknown path: %d %s, want a JSON 404", rec.Code, rec.Body)
	}
}

func TestPprofMuxHidesTheCommandLine(t *testing.T) {
	mux := httpapi.PprofMux()
	for path, want := range map[string]int{"/debug/pprof/": http.StatusOK, "/debug/pprof/cmdline": http.StatusNotFound} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
	}
}
