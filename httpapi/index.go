package httpapi

import (
	"net/http"
	"strings"
)

// Index answers GET / on the API's listener, so that whoever opens the bare
// address finds their way: a browser is sent to the console when it is
// served on this listener; anything else gets a JSON index of where things
// are (the check API, its OpenAPI document, health, the console).
func Index(consoleHere bool) http.Handler {
	index := map[string]any{
		"service": "sluice",
		"check":   "POST /v1/check",
		"admin":   "/v1/tenants",
		"openapi": "/v1/openapi.json",
		"health":  "/healthz",
		"ready":   "/readyz",
		"docs":    "https://github.com/sluicelabs/sluice/blob/main/docs/service.md",
		"console": nil,
	}
	if consoleHere {
		index["console"] = "/console/"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if consoleHere && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/console/", http.StatusFound)
			return
		}
		writeJSON(w, http.StatusOK, index)
	})
}
