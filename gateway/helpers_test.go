package gateway_test

import (
	"bufio"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/gateway"
	"github.com/sluicelabs/sluice/memory"
	"github.com/sluicelabs/sluice/metrics"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

const hsSecret = "an-hs256-secret-of-at-least-32-bytes!"

// Keys are generated once: RSA generation is slow under -race.
var (
	keysOnce           sync.Once
	rsaKey, rsaOther   *rsa.PrivateKey
	ecKey              *ecdsa.PrivateKey
	edPub              ed25519.PublicKey
	edKey              ed25519.PrivateKey
	rotatedA, rotatedB *rsa.PrivateKey
)

func keys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		gen := func() *rsa.PrivateKey {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			return k
		}
		rsaKey, rsaOther, rotatedA, rotatedB = gen(), gen(), gen(), gen()
		var err error
		if ecKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		if edPub, edKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
			panic(err)
		}
	})
}

// writePEM writes pub as a PKIX PEM file and returns its path.
func writePEM(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jwksServer serves a JSON Web Key Set whose keys a test can replace.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []map[string]string
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"keys": s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(keys ...map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func edJWK(kid string, k ed25519.PublicKey) map[string]string {
	return map[string]string{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64(k)}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]string {
	point, _ := k.Bytes()
	return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(point[1:33]), "y": b64(point[33:])}
}

// claims are valid for the test verifier unless a test changes them.
func claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iss": "https://issuer.test", "aud": "sluice-api",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

func sign(t testing.TB, method jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// upstream is an application behind the gateway: it echoes what it saw.
type upstream struct {
	*httptest.Server
	name string
	hits atomic.Int64
}

type echo struct {
	Upstream string `json:"upstream"`
	Path     string `json:"path"`
	// RequestURI is the request target as the upstream received it, before
	// any decoding.
	RequestURI    string `json:"request_uri"`
	XForwardedFor string `json:"x_forwarded_for"`
	// XForwardedProto and XForwardedHost are "scheme host" as the upstream
	// was told them.
	XForwardedProto string `json:"x_forwarded_proto"`
	XForwardedHost  string `json:"x_forwarded_host"`
	Authorization   bool   `json:"authorization"`
	// Header is every header the upstream received.
	Header http.Header `json:"header"`
}

func newUpstream(t testing.TB, name string) *upstream {
	u := &upstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		if r.URL.Path == "/slow" || r.URL.Path == "/api/slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echo{Upstream: name, Path: r.URL.Path, RequestURI: r.RequestURI, XForwardedFor: r.Header.Get("X-Forwarded-For"),
			XForwardedProto: r.Header.Get("X-Forwarded-Proto"), XForwardedHost: r.Header.Get("X-Forwarded-Host"), Authorization: r.Header.Get("Authorization") != "",
			Header: r.Header})
	}))
	t.Cleanup(u.Close)
	return u
}

// storeOf opens the store cfg names, as sluice gateway does: Redis when it
// names one, else a memory store. It is closed when the test ends, after the
// gateways the test closed.
func storeOf(t testing.TB, cfg *gateway.Config) sluice.Store {
	t.Helper()
	if cfg.Redis == "" {
		ms := memory.New(memory.Options{})
		t.Cleanup(func() { ms.Close() })
		return ms
	}
	rs, err := sluiceredis.Connect(cfg.Redis, sluiceredis.Options{Prefix: cfg.RedisPrefix}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

// newGateway parses the YAML config and builds a Gateway with metrics of
// its own, on the store the config names; the caller closes it.
func newGateway(t testing.TB, yamlConfig string) (*gateway.Config, *gateway.Gateway) {
	t.Helper()
	cfg, err := gateway.ParseConfig([]byte(yamlConfig))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yamlConfig)
	}
	reg := prometheus.NewRegistry()
	gw, err := gateway.New(cfg, gateway.Options{Store: storeOf(t, cfg), Metrics: metrics.New(reg), Requests: metrics.NewGatewayRequests(reg), Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, gw
}

// startGateway serves the YAML config on a real listener.
func startGateway(t testing.TB, yamlConfig string) (*gateway.Gateway, *httptest.Server) {
	t.Helper()
	_, gw := newGateway(t, yamlConfig)
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		srv.Close()
		gw.Close()
	})
	return gw, srv
}

type response struct {
	status int
	header http.Header
	body   string
	echo   echo
}

func do(t *testing.T, method, url string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: string(b)}
	json.Unmarshal(b, &r.echo)
	return r
}

// doRaw sends target as the request target, byte for byte: http.Client
// would re-encode some paths (a backslash as %5C) before sending them.
func doRaw(t *testing.T, addr, method, target string, header map[string]string) response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: gateway.test\r\nConnection: close\r\n", method, target)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: string(body)}
	json.Unmarshal(body, &r.echo)
	return r
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}
