package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestIndex: GET / sends a browser to the console when it is served here,
// and gives anything else a JSON index naming the API's entry points (with
// the console only where it is here).
func TestIndex(t *testing.T) {
	for _, c := range []struct {
		name        string
		consoleHere bool
		accept      string
		wantStatus  int
		wantConsole any
	}{
		{"browser_with_console", true, "text/html,application/xhtml+xml", http.StatusFound, nil},
		{"client_with_console", true, "application/json", http.StatusOK, "/console/"},
		{"browser_without_console", false, "text/html", http.StatusOK, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("Accept", c.accept)
			rec := httptest.NewRecorder()
			Index(c.consoleHere).ServeHTTP(rec, req)
			if rec.Code != c.wantStatus {
				t.Fatalf("status %d, want %d", rec.Code, c.wantStatus)
			}
			if c.wantStatus == http.StatusFound {
				if loc := rec.Header().Get("Location"); loc != "/console/" {
					t.Fatalf("Location %q, want /console/", loc)
				}
				return
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body["openapi"] != "/v1/openapi.json" || body["check"] != "POST /v1/check" || body["console"] != c.wantConsole {
				t.Fatalf("index %v", body)
			}
		})
	}
}
