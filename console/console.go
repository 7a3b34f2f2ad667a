// Package console is the web console of `sluice serve`, mounted at
// /console/: operators (with the admin token) and tenants (with one of their
// admin-role keys) manage tenants, keys and rules, look up what a subject
// has left, and watch the check engine's decisions live.
//
// The pages are rendered on the server with html/template; the few browser
// libraries (htmx for live fragments, uPlot for the chart) are vendored
// files embedded in the binary, so there is no build step. Every change the
// console makes is a call of the admin API's own handlers, made in process
// with the signed-in user's credential: the console has no second path to
// the catalog, and a tenant key sees exactly what the API lets it see. The
// live view reads what the check engine records through its Observer.
//
// Security: the credential a user signs in with stays on the server, in
// this process's memory, under a random session ID sent as an HttpOnly,
// SameSite=Strict cookie (Secure under TLS) that expires; every change needs
// the session's CSRF token and a same-origin request; pages are served with
// a Content-Security-Policy that allows no inline script or style.
package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/envoyrls"
	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/internal/accesslog"
	"github.com/sluicelabs/sluice/internal/tlsconfig"
	"github.com/sluicelabs/sluice/middleware"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// DefaultSessionTTL is how long a sign-in lasts when Options.SessionTTL is 0.
const DefaultSessionTTL = 8 * time.Hour

// Options configure a Console.
type Options struct {
	// API is the service's admin API; every action goes through its
	// handlers.
	API *httpapi.API
	// Engine is the check engine whose decisions the overview shows and
	// whose breaker state it reports.
	Engine *check.Engine
	// StoreName names the rate-limit store ("memory", "redis").
	StoreName string
	// StorePing reports whether the store answers; nil: always (in process).
	StorePing func(context.Context) error
	// EnvoyConfig returns the loaded Envoy configuration, nil while the
	// Envoy rate limit service is off (a nil EnvoyConfig: always off).
	EnvoyConfig func() *envoyrls.Config
	// SessionTTL bounds a sign-in (default DefaultSessionTTL).
	SessionTTL time.Duration
	// SignInFailures limits the failed sign-ins of one client address,
	// counted by Engine (default DefaultSignInFailures); past it sign-in
	// answers 429 with Retry-After without judging the secret.
	SignInFailures sluice.Limit
	// ClientAddr names a request's client for that limit (default: the
	// peer address, middleware.ClientIP with no trusted proxies).
	ClientAddr func(*http.Request) string
	// OverTLS reports whether the browser reached the console over TLS,
	// which makes the session cookie Secure (default: the request came over
	// TLS; behind a proxy that terminates TLS, ForwardedTLS).
	OverTLS func(*http.Request) bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Console serves the web console. Create it with New.
type Console struct {
	opts     Options
	api      http.Handler
	live     *Live
	sessions *sessions
	throttle *signInThrottle
	// refusals samples the log lines of refused sign-ins.
	refusals *accesslog.Throttle
	pages    map[string]*template.Template
	log      *slog.Logger
}

// New returns a Console and makes it the engine's observer.
func New(opts Options) (*Console, error) {
	if opts.API == nil || opts.Engine == nil {
		return nil, errors.New("console: an API and a check engine are required")
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SignInFailures == (sluice.Limit{}) {
		opts.SignInFailures = DefaultSignInFailures
	}
	if err := opts.SignInFailures.Validate(); err != nil {
		return nil, fmt.Errorf("console: sign-in failure limit: %w", err)
	}
	if opts.ClientAddr == nil {
		opts.ClientAddr = middleware.ClientIP(middleware.TrustedProxies{})
	}
	if opts.OverTLS == nil {
		opts.OverTLS = ForwardedTLS(middleware.TrustedProxies{})
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{
		opts:     opts,
		api:      opts.API.Handler(),
		live:     NewLive(nil),
		sessions: newSessions(opts.SessionTTL, time.Now),
		throttle: newSignInThrottle(opts.Engine, opts.SignInFailures),
		refusals: accesslog.NewThrottle(),
		pages:    pages,
		log:      opts.Logger,
	}
	opts.Engine.SetObserver(c.live.Observe)
	return c, nil
}

// Register mounts the console on mux at Prefix.
func (c *Console) Register(mux *http.ServeMux) { mux.Handle(Prefix, c.Handler()) }

// Serve serves the console on a listener of its own at addr (GET / sends to
// the console), with the given TLS (nil: plain HTTP), until stop.
func (c *Console) Serve(addr string, tls *tlsconfig.Reloader, log *slog.Logger) (stop func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --console-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	c.Register(mux)
	mux.Handle("GET /{$}", http.RedirectHandler(Prefix, http.StatusSeeOther))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 15 * time.Second, IdleTimeout: 2 * time.Minute, TLSConfig: tlsconfig.HTTPConfig(tls),
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = tlsconfig.ServeHTTP(srv, ln) }()
	log.Info("console listening", "addr", ln.Addr().String(), "tls", tlsconfig.Mode(tls))
	return srv.Close, nil
}

// Handler serves the console's paths (all under Prefix).
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET "+Prefix+"signin", c.handleSignInPage)
	mux.HandleFunc("POST "+Prefix+"signin", c.handleSignIn)
	mux.HandleFunc("POST "+Prefix+"signout", c.signedIn(c.handleSignOut))

	mux.HandleFunc("GET "+Prefix+"{$}", c.signedIn(c.handleOverview))
	mux.HandleFunc("GET "+Prefix+"live", c.signedIn(c.handleLiveFragment))
	mux.HandleFunc("GET "+Prefix+"live.json", c.signedIn(c.handleLiveJSON))

	mux.HandleFunc("GET "+Prefix+"tenants", c.signedIn(c.handleTenants))
	mux.HandleFunc("POST "+Prefix+"tenants", c.signedIn(c.handleCreateTenant))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/status", c.signedIn(c.handleTenantStatus))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/delete", c.signedIn(c.handleConfirmDeleteTenant))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/delete", c.signedIn(c.handleDeleteTenant))

	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/keys", c.signedIn(c.handleKeys))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/keys", c.signedIn(c.handleCreateKey))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/keys/{id}/revoke", c.signedIn(c.handleConfirmRevokeKey))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/keys/{id}/revoke", c.signedIn(c.handleRevokeKey))

	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules", c.signedIn(c.handleRules))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules/new", c.signedIn(c.handleRuleForm))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules/{name}/edit", c.signedIn(c.handleRuleForm))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules/{name}/overrides", c.signedIn(c.handleOverrides))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/rules/{name}/overrides", c.signedIn(c.handleSaveOverride))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules/{name}/overrides/{override}/edit", c.signedIn(c.handleEditOverride))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules/{name}/overrides/{override}/delete", c.signedIn(c.handleConfirmDeleteOverride))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/rules/{name}/overrides/{override}/delete", c.signedIn(c.handleDeleteOverride))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/rules", c.signedIn(c.handleSaveRule))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/rules/{name}/delete", c.signedIn(c.handleConfirmDeleteRule))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/rules/{name}/delete", c.signedIn(c.handleDeleteRule))

	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/inspect", c.signedIn(c.handleInspect))
	mux.HandleFunc("POST "+Prefix+"tenants/{tenant}/inspect/reset", c.signedIn(c.handleResetSubject))

	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/usage", c.signedIn(c.handleUsage))
	mux.HandleFunc("GET "+Prefix+"tenants/{tenant}/usage.json", c.signedIn(c.handleUsageJSON))

	mux.HandleFunc("GET "+Prefix+"envoy", c.signedIn(c.handleEnvoy))
	mux.HandleFunc("GET "+Prefix+"audit", c.signedIn(c.handleAudit))
	return secureHeaders(mux)
}

// contentSecurityPolicy allows the console's own files and nothing inline.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secureHeaders sets the headers every console answer carries.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, Prefix+"static/") {
			// Pages show tenants' data and, once, a new key's secret.
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// File names carry their version; the console's own two files
		// change with the binary, so keep it short.
		w.Header().Set("Cache-Control", "public, max-age=300")
		next.ServeHTTP(w, r)
	})
}

// apiAnswer is the admin API's answer to a call the console made.
type apiAnswer struct {
	Status int
	Body   []byte
	// Code and Message are those of an error answer.
	Code, Message string
}

func (a apiAnswer) ok() bool { return a.Status >= 200 && a.Status < 300 }

// decode reads a successful answer's JSON body into v.
func (a apiAnswer) decode(v any) error {
	if err := json.Unmarshal(a.Body, v); err != nil {
		return fmt.Errorf("read the admin API's answer: %w", err)
	}
	return nil
}

// call runs one admin API call in process, as the signed-in user: the same
// handlers, authorization and validation as a call over HTTP.
func (c *Console) call(r *http.Request, s *session, method, path string, body any) apiAnswer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return apiAnswer{Status: http.StatusInternalServerError, Message: "The console could not encode the request."}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		return apiAnswer{Status: http.StatusBadRequest, Message: "That name cannot be part of a request path."}
	}
	req.RemoteAddr = r.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+s.secret)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	c.api.ServeHTTP(rec, req)
	out := apiAnswer{Status: rec.status, Body: rec.body.Bytes()}
	if out.Status == 0 {
		out.Status = http.StatusOK
	}
	if !out.ok() {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(out.Body, &e) == nil && e.Error.Message != "" {
			out.Code, out.Message = e.Error.Code, e.Error.Message
		} else {
			out.Message = fmt.Sprintf("The admin API answered %d.", out.Status)
		}
	}
	return out
}

// apiPath joins escaped path segments under /v1/.
func apiPath(segments ...string) string {
	var b strings.Builder
	b.WriteString("/v1")
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// recorder keeps an answer of the API's handlers.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
