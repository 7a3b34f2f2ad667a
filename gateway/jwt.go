package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// verifier checks bearer tokens for one jwt: entry of the config.
type verifier struct {
	name     string
	parser   *jwt.Parser
	hsSecret []byte
	static   []crypto.PublicKey // from PEM files
	jwks     *jwks              // nil without jwks_url
	// maxTokenBytes bounds what verify is asked to parse.
	maxTokenBytes int
}

func newVerifier(ctx context.Context, name string, c JWTConfig, log *slog.Logger) (*verifier, error) {
	v := &verifier{name: name, maxTokenBytes: c.MaxTokenBytes}
	if v.maxTokenBytes == 0 {
		v.maxTokenBytes = defaultMaxTokenBytes
	}
	methods := map[string]bool{}
	if c.HS256SecretEnv != "" {
		v.hsSecret = []byte(os.Getenv(c.HS256SecretEnv))
		methods["HS256"] = true
	}
	for _, path := range c.PublicKeys {
		key, err := readPublicKey(path)
		if err != nil {
			return nil, err
		}
		v.static = append(v.static, key)
		methods[algorithmOf(key)] = true
	}
	if c.JWKSURL != "" {
		refresh := time.Duration(c.JWKSRefresh)
		if refresh == 0 {
			refresh = defaultJWKSRefresh
		}
		v.jwks = newJWKS(ctx, c.JWKSURL, refresh, log.With("jwt", name))
		for _, m := range []string{"RS256", "ES256", "EdDSA"} {
			methods[m] = true
		}
	}
	valid := c.Algorithms
	if len(valid) == 0 {
		for m := range methods {
			valid = append(valid, m)
		}
	}
	leeway := defaultLeeway
	if c.Leeway != nil {
		leeway = time.Duration(*c.Leeway)
	}
	opts := []jwt.ParserOption{
		// Only the configured algorithms: "none", and an HMAC token signed
		// with a public key's bytes (algorithm confusion), fail here.
		jwt.WithValidMethods(valid),
		jwt.WithLeeway(leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if len(c.Audience) > 0 {
		opts = append(opts, jwt.WithAudience(c.Audience...))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// verify returns the claims of a valid token.
func (v *verifier) verify(ctx context.Context, raw string) (jwt.MapClaims, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		return v.keysFor(ctx, t)
	})
	if err != nil {
		return nil, err
	}
	return claims, nil
}

// keysFor returns the candidate keys for t: only keys of the kind its
// algorithm uses, so no key is ever used by the wrong algorithm.
func (v *verifier) keysFor(ctx context.Context, t *jwt.Token) (any, error) {
	if _, ok := t.Method.(*jwt.SigningMethodHMAC); ok {
		if len(v.hsSecret) == 0 {
			return nil, errors.New("no HMAC secret configured")
		}
		return v.hsSecret, nil
	}
	kid, _ := t.Header["kid"].(string)
	var candidates []crypto.PublicKey
	candidates = append(candidates, v.static...)
	if v.jwks != nil {
		candidates = append(candidates, v.jwks.keys(ctx, kid)...)
	}
	set := jwt.VerificationKeySet{}
	for _, k := range candidates {
		if algorithmOf(k) == t.Method.Alg() {
			set.Keys = append(set.Keys, k)
		}
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("no %s key matches the token", t.Method.Alg())
	}
	return set, nil
}

func (v *verifier) close() {
	if v.jwks != nil {
		v.jwks.stop()
	}
}

func algorithmOf(k crypto.PublicKey) string {
	switch k := k.(type) {
	case *rsa.PublicKey:
		return "RS256"
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return "ES256"
		}
	case ed25519.PublicKey:
		return "EdDSA"
	}
	return ""
}

// readPublicKey reads a PEM public key (PKIX "PUBLIC KEY", or PKCS#1 "RSA
// PUBLIC KEY") or the public key of a PEM certificate.
func readPublicKey(path string) (crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("%s holds a %q PEM block; a PUBLIC KEY is expected (never a private key)", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if algorithmOf(key) == "" {
		return nil, fmt.Errorf("%s: only RSA, ECDSA P-256 and Ed25519 public keys are supported", path)
	}
	return key, nil
}

// jwks keeps the keys of a JWKS URL, refreshed in the background and when a
// token names an unknown key id (a rotation), at most once per
// minRefetch.
type jwks struct {
	url    string
	client *http.Client
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	byKid     map[string]crypto.PublicKey
	all       []crypto.PublicKey
	lastFetch time.Time
}

const minRefetch = time.Second

func newJWKS(ctx context.Context, url string, refresh time.Duration, log *slog.Logger) *jwks {
	ctx, cancel := context.WithCancel(ctx)
	j := &jwks{url: url, client: &http.Client{Timeout: 5 * time.Second}, log: log, cancel: cancel, done: make(chan struct{})}
	if err := j.fetch(ctx); err != nil {
		// Not fatal: the identity provider may come up after the gateway;
		// tokens are refused until the keys arrive.
		log.Warn("fetching JWKS failed; retrying in the background", "url", url, "error", err)
	}
	go j.loop(ctx, refresh)
	return j
}

func (j *jwks) loop(ctx context.Context, refresh time.Duration) {
	defer close(j.done)
	t := time.NewTicker(refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := j.fetch(ctx); err != nil && ctx.Err() == nil {
				j.log.Warn("refreshing JWKS failed; keeping the previous keys", "url", j.url, "error", err)
			}
		}
	}
}

func (j *jwks) stop() {
	j.cancel()
	<-j.done
}

// keys returns the key with id kid, or every key when the token names none.
// When there is no such key (an unknown id: a rotation; or no keys at all:
// the identity provider was down at start) it refetches once first, at most
// once per minRefetch, rather than refusing every token until the next
// background refresh.
func (j *jwks) keys(ctx context.Context, kid string) []crypto.PublicKey {
	j.mu.Lock()
	found := j.lookup(kid)
	// Claim the refetch under the lock, so a burst of tokens with unknown
	// key ids costs one fetch, not one each.
	refetch := len(found) == 0 && time.Since(j.lastFetch) >= minRefetch
	if refetch {
		j.lastFetch = time.Now()
	}
	j.mu.Unlock()
	if !refetch {
		return found
	}
	if err := j.download(ctx); err != nil {
		j.log.Warn("refetching JWKS for a key not seen yet failed", "url", j.url, "kid", kid, "error", err)
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lookup(kid)
}

// lookup returns the keys a token naming kid may be checked with; j.mu is
// held.
func (j *jwks) lookup(kid string) []crypto.PublicKey {
	if kid == "" {
		return j.all
	}
	if k, ok := j.byKid[kid]; ok {
		return []crypto.PublicKey{k}
	}
	return nil
}

func (j *jwks) fetch(ctx context.Context) error {
	j.mu.Lock()
	j.lastFetch = time.Now()
	j.mu.Unlock()
	return j.download(ctx)
}

func (j *jwks) download(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	var set struct {
		Keys []jsonWebKey `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return fmt.Errorf("decode JWKS: %w", err)
	}
	byKid := map[string]crypto.PublicKey{}
	var all []crypto.PublicKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key, err := k.publicKey()
		if err != nil {
			j.log.Warn("skipping a JWKS key", "kid", k.Kid, "error", err)
			continue
		}
		all = append(all, key)
		if k.Kid != "" {
			byKid[k.Kid] = key
		}
	}
	if len(all) == 0 {
		return errors.New("JWKS holds no usable signing key")
	}
	j.mu.Lock()
	j.byKid, j.all = byKid, all
	j.mu.Unlock()
	return nil
}

type jsonWebKey struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func (k jsonWebKey) publicKey() (crypto.PublicKey, error) {
	b64 := func(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")) }
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err := errors.Join(err1, err2); err != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA n or e")
		}
		key := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if key.N.BitLen() < 2048 {
			return nil, errors.New("RSA keys under 2048 bits are refused")
		}
		return key, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, fmt.Errorf("curve %q is not supported (P-256 only)", k.Crv)
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if err := errors.Join(err1, err2); err != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("bad EC x or y")
		}
		// Parse through the uncompressed point encoding, which checks that
		// the point is on the curve.
		point := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
		if err != nil {
			return nil, fmt.Errorf("EC point: %w", err)
		}
		return pub, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, fmt.Errorf("curve %q is not supported (Ed25519 only)", k.Crv)
		}
		x, err := b64(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad Ed25519 x")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("key type %q is not supported", k.Kty)
}
