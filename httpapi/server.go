package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// NewServer is the HTTP server of a service's JSON listeners (the API's,
// Envoy's JSON form): bounded reads, writes, idle connections and headers,
// so a slow or greedy client cannot hold a connection or memory; errors as
// JSON (WithJSONErrors); and net/http's own complaints in the service's log.
func NewServer(mux *http.ServeMux, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           WithJSONErrors(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// PprofMux serves net/http/pprof, for a listener of its own, never the
// public one; without /debug/pprof/cmdline, which would show a token given
// by flag.
func PprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
