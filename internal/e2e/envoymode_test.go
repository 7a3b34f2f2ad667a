package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
	"github.com/sluicelabs/sluice/internal/tlsconfig/tlstest"
)

// TestEnvoyModeAsBinRatelimit runs the binary as Envoy Gateway, Istio,
// Contour and ENV's compose file run envoyproxy/ratelimit's image: under the
// name /bin/ratelimit, with no arguments, configured by ENV's variables
// alone, as uid 65534 (Envoy Gateway's security context) in a directory it
// cannot write, with HOME and TMPDIR there too. It must start, serve Envoy's
// rate limit service with ENV's counting (a budget charged when the stream
// ends is enforced: ENV's token-quota.sh), and serve on ENV's HTTP port what
// ENV serves there and nothing of Sluice's own API.
func TestEnvoyModeAsBinRatelimit(t *testing.T) {
	base := envModeDir(t)
	runEnvMode(t, base, "REDIS_URL="+testenv.Redis(t).Addr)
}

// TestEnvoyModeRedisTLS is the same run on a Redis reached over TLS as
// Envoy Gateway configures envoyproxy/ratelimit: REDIS_TLS with a private
// CA, and a client certificate the server requires (tls-auth-clients).
func TestEnvoyModeRedisTLS(t *testing.T) {
	base := envModeDir(t)
	ca := tlstest.NewCA(t, "redis-ca")
	server := ca.Server(t)
	client := ca.Client(t, "ratelimit")
	files := map[string][]byte{"ca.pem": ca.PEM, "server.pem": server.Cert, "server-key.pem": server.Key,
		"client.pem": client.Cert, "client-key.pem": client.Key}
	for name, data := range files {
		// Readable by uid 65534: a test's keys, not a secret.
		mustRun(t, os.WriteFile(filepath.Join(base, name), data, 0o644))
	}
	at := func(name string) string { return filepath.Join(base, name) }
	redis := testenv.RedisTLS(t, testenv.RedisTLSFiles{Cert: at("server.pem"), Key: at("server-key.pem"), CA: at("ca.pem"), AuthClients: true})
	runEnvMode(t, base, "REDIS_URL="+redis.TLSAddr, "REDIS_TLS=true", "REDIS_TLS_CACERT="+at("ca.pem"),
		"REDIS_TLS_CLIENT_CERT="+at("client.pem"), "REDIS_TLS_CLIENT_KEY="+at("client-key.pem"))
}

// envModeDir is a directory uid 65534 can read: t.TempDir's parents are
// 0700.
func envModeDir(t *testing.T) string {
	base, err := os.MkdirTemp("", "sluice-envmode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	mustRun(t, os.Chmod(base, 0o755))
	return base
}

// runEnvMode runs base/bin/ratelimit with ENV's variables, redisEnv among
// them, and checks what TestEnvoyModeAsBinRatelimit says.
func runEnvMode(t *testing.T, base string, redisEnv ...string) {
	for _, d := range []string{"bin", "runtime/current/ratelimit/config", "readonly"} {
		mustRun(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	ratelimit := copyRatelimit(t, filepath.Join(base, "bin"))
	domain := "envmode" + strconv.FormatInt(time.Now().UnixNano(), 36)
	writeFile(t, filepath.Join(base, "runtime/current/ratelimit/config/quota.yaml"), fmt.Sprintf(`
domain: %s
descriptors:
  - key: service
    rate_limit: {unit: hour, requests_per_unit: 2}
`, domain))
	readonly := filepath.Join(base, "readonly")
	mustRun(t, os.Chmod(readonly, 0o555))

	env := append([]string{"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "RUNTIME_WATCH_ROOT=false"}, redisEnv...)
	p := startRatelimit(t, ratelimit, readonly, filepath.Join(base, "runtime/current"), true, env...)
	if os.Geteuid() != 0 {
		t.Log("not root: runs as this user, in a directory it cannot write")
	}
	httpAddr, debugAddr, out := p.httpAddr, p.debugAddr, p.out

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(url string) (int, string) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// ENV's token-quota.sh: 2 per hour, checked with hits_addend 0 on the
	// request and charged 1 when the stream ends; the third request passes
	// (2 of 2 is not over), its charge makes 3, the fourth is denied.
	overall := func(hits int) string {
		t.Helper()
		body := fmt.Sprintf(`{"domain":%q,"descriptors":[{"entries":[{"key":"service","value":"llm"}],"hitsAddend":%d}]}`, domain, hits)
		resp, err := client.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			OverallCode string `json:"overallCode"`
		}
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("POST /json: %d %s", resp.StatusCode, raw)
		}
		return r.OverallCode
	}
	hour := time.Now().Unix() / 3600
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if got := overall(0); got != want {
			if time.Now().Unix()/3600 != hour {
				t.Skip("crossed the top of the hour; the window started again")
			}
			t.Fatalf("token-quota request %d: %s, want %s", i+1, got, want)
		}
		overall(1) // the stream's end: Envoy ignores the answer
	}

	// ENV's HTTP port serves what ENV serves there, and nothing of Sluice.
	for _, path := range []string{"/v1/check", "/metrics", "/console/", "/readyz", "/v1/tenants"} {
		if code, body := get("http://" + httpAddr + path); code != http.StatusNotFound {
			t.Errorf("GET %s on ENV's HTTP port: %d %.80s, want 404", path, code, body)
		}
	}
	if code, body := get("http://" + debugAddr + "/rlconfig"); code != http.StatusOK || !strings.Contains(body, domain) {
		t.Errorf("GET /rlconfig: %d %.200s", code, body)
	}
	entries, err := os.ReadDir(readonly)
	if err != nil || len(entries) != 0 {
		t.Errorf("the working directory holds %v (%v), want nothing written", entries, err)
	}
	log := out.String()
	for _, unwanted := range []string{"admin token", "sluice.db", `"level":"ERROR"`} {
		if strings.Contains(log, unwanted) {
			t.Errorf("the log mentions %q; ENV mode has no catalog, no token and no error to report", unwanted)
		}
	}
	p.stop()
}

func mustRun(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	mustRun(t, err)
	mustRun(t, os.WriteFile(to, b, mode))
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	mustRun(t, os.WriteFile(path, []byte(text), 0o644))
}
