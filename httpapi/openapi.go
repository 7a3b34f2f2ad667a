package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of every route Register
// mounts (and of /metrics, which sluice serve adds). It is embedded rather
// than generated so that it is reviewed as a document; the tests keep it
// true: every request and answer of the httpapi test suites is validated
// against it, and its operations are compared with routes().
//
//go:embed openapi.json
var openAPIDocument []byte

// handleOpenAPI serves the document. It needs no credentials: it describes
// the API, not any tenant.
func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	// Fixed for the life of the binary: caches may keep it briefly.
	h.Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
