package gateway

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/sluicelabs/sluice/middleware"
)

// Paths are normalised once, before anything looks at them: routes are
// matched on the cleaned path and the forwarded path is built from it, so
// the route that authenticates and limits a request is the one whose
// upstream gets it, and no upstream is sent a path outside its base path.
//
// Cleaning resolves what has one meaning everywhere ("." and ".." segments,
// repeated slashes). What upstreams read differently (an encoded dot segment,
// an encoded slash or backslash, a backslash, a dot segment carrying a
// ";param" that Java servers strip before resolving it) is refused with 400
// rather than guessed at.

// cleanPath is path.Clean on a decoded path, rooted, keeping a trailing
// slash (as net/http's ServeMux does): "/api/" and "/api" may be different
// resources to an upstream.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// pathProblem says in a sentence why the path p (raw or decoded) is refused,
// or returns "". It is applied to the raw path, and to the decoded one so
// that an encoding hidden under another (%252e) is refused too.
func pathProblem(p string) string {
	if strings.IndexByte(p, '\\') >= 0 {
		return "The request path holds a backslash, which some servers read as a slash; send the path with / only."
	}
	lower := strings.ToLower(p)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
		return "The request path holds an encoded slash (%2F or %5C), which upstreams read differently; send the path without it."
	}
	for seg := range strings.SplitSeq(p, "/") {
		if strings.HasPrefix(seg, ".;") || strings.HasPrefix(seg, "..;") {
			return "The request path holds a dot segment with a parameter (like ..;x), which some servers resolve as ..; send the path without it."
		}
		if !strings.Contains(strings.ToLower(seg), "%2e") {
			continue
		}
		dec, err := url.PathUnescape(seg)
		if err != nil || dec == "." || dec == ".." || strings.HasPrefix(dec, ".;") || strings.HasPrefix(dec, "..;") {
			return "The request path holds an encoded dot segment (%2E), which is refused rather than guessed at; send the path without it."
		}
	}
	return ""
}

// normalisePaths refuses the paths pathProblem names and hands h the
// request with its path cleaned, RawPath re-encoded from it. Requests are
// answered on the cleaned path directly, never redirected: a redirect would
// only make the client ask again for the same thing.
func normalisePaths(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/") {
			// "*" (OPTIONS *), CONNECT authorities: no route serves them.
			middleware.WriteProblem(w, http.StatusBadRequest, "The request path must start with /.", 0)
			return
		}
		if msg := pathProblem(r.URL.RawPath); msg != "" {
			middleware.WriteProblem(w, http.StatusBadRequest, msg, 0)
			return
		}
		if msg := pathProblem(r.URL.Path); msg != "" {
			middleware.WriteProblem(w, http.StatusBadRequest, msg, 0)
			return
		}
		if clean := cleanPath(r.URL.Path); clean != r.URL.Path || r.URL.RawPath != "" {
			u := *r.URL
			u.Path, u.RawPath = clean, ""
			r2 := *r
			r2.URL = &u
			r = &r2
		}
		h.ServeHTTP(w, r)
	})
}

// forwardedPath is the path sent to an upstream whose base path is base:
// the cleaned request path, less the route's prefix when it strips it,
// under base. Cleaning again here keeps the guarantee local: whatever the
// handler in front did, nothing with a dot segment is joined to base.
func forwardedPath(base, reqPath, prefix string, strip bool) string {
	rest := cleanPath(reqPath)
	if strip {
		rest = stripPrefix(rest, prefix)
	}
	if base == "" || base == "/" {
		return rest
	}
	return strings.TrimSuffix(base, "/") + rest
}

func stripPrefix(path, prefix string) string {
	rest := strings.TrimPrefix(path, strings.TrimSuffix(prefix, "/"))
	if !strings.HasPrefix(rest, "/") {
		rest = "/" + rest
	}
	return rest
}
