package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicelabs/sluice/httpapi"
	"github.com/sluicelabs/sluice/middleware"
)

// cookieName names the session cookie.
const cookieName = "sluice_console"

// MaxSessionsPerCredential bounds the sessions one credential (the operator
// token, or one admin key) keeps; signing in past it ends that credential's
// oldest session, and never another credential's, so no tenant can sign
// anybody else out by signing in over and over.
const MaxSessionsPerCredential = 5

// maxSessions bounds the sessions of all credentials together, a memory
// bound only: at it a new sign-in is refused, ending nobody's session.
const maxSessions = 10_000

// errTooManySessions refuses a sign-in at maxSessions.
var errTooManySessions = errors.New("the console has as many sessions open as it keeps; try again later, or ask the operator")

// session is one signed-in browser. The secret it was signed in with never
// leaves this process: pages, URLs and logs only ever see the session ID
// (in the cookie) and the CSRF token.
type session struct {
	id      string
	secret  string
	caller  httpapi.Caller
	csrf    string
	expires time.Time
	// flash is a one-time message for the next page; newSecret is a key's
	// secret shown once, on the next keys page, then forgotten.
	flash     string
	newSecret *createdKey
}

type createdKey struct{ Tenant, Name, ID, Secret string }

type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	byID map[string]*session
	// byCredential holds each credential's sessions, oldest first.
	byCredential map[string][]*session
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, byID: make(map[string]*session), byCredential: make(map[string][]*session)}
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// start opens a session for a caller signed in with secret, ending the
// oldest session of the same secret past MaxSessionsPerCredential.
func (s *sessions) start(secret string, caller httpapi.Caller) (*session, error) {
	now := s.now()
	sess := &session{id: randomToken(), secret: secret, caller: caller, csrf: randomToken(), expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, old := range s.byID {
		if !now.Before(old.expires) {
			s.drop(old)
		}
	}
	own := s.byCredential[secret]
	for len(own) >= MaxSessionsPerCredential {
		s.drop(own[0])
		own = s.byCredential[secret]
	}
	if len(s.byID) >= maxSessions {
		return nil, errTooManySessions
	}
	s.byID[sess.id] = sess
	s.byCredential[secret] = append(own, sess)
	return sess, nil
}

// drop forgets sess; s.mu is held.
func (s *sessions) drop(sess *session) {
	delete(s.byID, sess.id)
	own := slices.DeleteFunc(s.byCredential[sess.secret], func(o *session) bool { return o == sess })
	if len(own) == 0 {
		delete(s.byCredential, sess.secret)
	} else {
		s.byCredential[sess.secret] = own
	}
}

// get returns the live session of r's cookie, or nil.
func (s *sessions) get(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.byID[ck.Value]
	if sess == nil {
		return nil
	}
	if !s.now().Before(sess.expires) {
		s.drop(sess)
		return nil
	}
	return sess
}

func (s *sessions) end(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID[sess.id] == sess {
		s.drop(sess)
	}
}

// takeFlash returns and clears the session's one-time message and secret.
func (s *sessions) takeFlash(sess *session) (string, *createdKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg, key := sess.flash, sess.newSecret
	sess.flash, sess.newSecret = "", nil
	return msg, key
}

func (s *sessions) setFlash(sess *session, msg string, key *createdKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess.flash, sess.newSecret = msg, key
}

// setCookie sends the session cookie; Secure when the browser came over TLS.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, sess *session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: sess.id, Path: Prefix, Expires: sess.expires,
		MaxAge: int(time.Until(sess.expires).Seconds()), HttpOnly: true, Secure: c.opts.OverTLS(r), SameSite: http.SameSiteStrictMode,
	})
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, Secure: c.opts.OverTLS(r), SameSite: http.SameSiteStrictMode})
}

// ForwardedTLS reports a request as over TLS when it is, or when a proxy of
// trusted, the request's peer, says with X-Forwarded-Proto: https that the
// browser reached it over TLS (a proxy that terminates TLS). The header of
// anyone else is ignored.
func ForwardedTLS(trusted middleware.TrustedProxies) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if r.TLS != nil {
			return true
		}
		return trusted.TrustsPeer(r) && strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
	}
}

// sameOrigin reports whether a state-changing request comes from a page of
// this server: browsers send Sec-Fetch-Site or Origin on every POST.
// SameSite=Strict already keeps the cookie off cross-site requests; this
// also stops a cross-site sign-in form (login CSRF).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser, or an old one: the CSRF token still guards
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// validCSRF compares the form's token with the session's in constant time.
func validCSRF(r *http.Request, sess *session) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// signedIn runs h for a request of a signed-in user whose credential is
// still good (a revoked key or suspended tenant ends the session at once),
// and, for a POST, only with a valid CSRF token from the same origin.
func (c *Console) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := c.sessions.get(r)
		if sess == nil {
			c.toSignIn(w, r, "")
			return
		}
		if caller, err := c.opts.API.AdminCaller(sess.secret); err != nil || caller != sess.caller {
			c.sessions.end(sess)
			c.clearCookie(w, r)
			msg := "You were signed out: the credential you signed in with no longer grants the same access."
			if err != nil {
				msg = "You were signed out: " + err.Error()
			}
			c.toSignIn(w, r, msg)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if !sameOrigin(r) || !validCSRF(r, sess) {
				c.renderError(w, r, sess, http.StatusForbidden,
					"This form is out of date or did not come from this console (its CSRF token does not match); reload the page and try again. Nothing was changed.")
				return
			}
		}
		h(w, r, sess)
	}
}

// maxFormBytes bounds a form post.
const maxFormBytes = 64 << 10

// toSignIn sends the browser to the sign-in page; fragments and JSON get a
// 401 instead, which the page's script turns into a reload.
func (c *Console) toSignIn(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Method != http.MethodGet || r.Header.Get("HX-Request") != "" || r.URL.Path == Prefix+"live.json" {
		w.Header().Set("HX-Redirect", Prefix+"signin")
		http.Error(w, "Sign in to the console first.", http.StatusUnauthorized)
		return
	}
	c.render(w, r, nil, http.StatusOK, "signin", signInPage{Message: msg})
}
