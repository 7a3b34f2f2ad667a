// Package tlsconfig builds the server *tls.Config of every Sluice listener
// from a certificate file, its key file and, for mutual TLS, a file of client
// CA certificates. The files are watched: a rotated certificate (or CA
// bundle) is served from the next handshake, without a restart, and a broken
// replacement leaves the last good one in service.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultCheckInterval is how often, at most, the files are looked at again:
// a rotated certificate is served within a second (envoyproxy/ratelimit
// watches its files). Handshakes between two checks cost no system call.
const DefaultCheckInterval = 500 * time.Millisecond

// Files names the PEM files of a listener. Cert and Key are both required;
// ClientCA, when set, turns on mutual TLS.
type Files struct {
	// Cert holds the certificate, then any intermediates.
	Cert string
	// Key holds the certificate's private key.
	Key string
	// ClientCA holds the CA certificates client certificates must chain to.
	ClientCA string
}

// Role says which of the files a FileError is about.
type Role string

// The roles of the files, for callers that name them after their flags or
// configuration fields.
const (
	RoleCert     Role = "cert"
	RoleKey      Role = "key"
	RoleClientCA Role = "client_ca"
	// RoleCA is the CA file a client checks a server's certificate with.
	RoleCA Role = "ca"
)

// FileError is a problem with one of the files.
type FileError struct {
	Role Role
	Path string
	Err  error
}

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// Options tune a Reloader.
type Options struct {
	// Logger receives one line per reload, and one per broken replacement;
	// nil is slog.Default().
	Logger *slog.Logger
	// CheckInterval is how often, at most, the files' modification times are
	// looked at, on a handshake; 0 is DefaultCheckInterval.
	CheckInterval time.Duration
}

// stamp identifies one version of a file without reading it.
type stamp struct {
	mod  time.Time
	size int64
	err  string
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{err: err.Error()}
	}
	return stamp{mod: fi.ModTime(), size: fi.Size()}
}

// Reloader serves the certificate and client CAs of Files, reloading them
// when the files change.
type Reloader struct {
	files Files
	log   *slog.Logger
	every time.Duration

	mu        sync.Mutex
	nextCheck time.Time
	// The stamps are of the versions last tried, good or not, so a broken
	// file is tried (and logged) once, and again only once it changes.
	certSeen, keySeen, caSeen stamp
	cert                      *tls.Certificate
	pool                      *x509.CertPool
}

// New loads files and returns their Reloader. Every error is a *FileError.
func New(files Files, opts Options) (*Reloader, error) {
	if files.Cert == "" {
		return nil, &FileError{Role: RoleCert, Err: errors.New("a certificate file is required")}
	}
	if files.Key == "" {
		return nil, &FileError{Role: RoleKey, Err: errors.New("the certificate needs its key file")}
	}
	r := &Reloader{files: files, log: opts.Logger, every: opts.CheckInterval}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.every <= 0 {
		r.every = DefaultCheckInterval
	}
	r.certSeen, r.keySeen = stampOf(files.Cert), stampOf(files.Key)
	cert, err := LoadKeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, err
	}
	r.cert = cert
	if files.ClientCA != "" {
		r.caSeen = stampOf(files.ClientCA)
		if r.pool, err = LoadCAPool(files.ClientCA); err != nil {
			return nil, err
		}
	}
	r.nextCheck = time.Now().Add(r.every)
	return r, nil
}

// LoadKeyPair reads a certificate chain and its private key.
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, &FileError{RoleCert, certFile, fmt.Errorf("the certificate file cannot be read: %w", err)}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &FileError{RoleKey, keyFile, fmt.Errorf("the key file cannot be read: %w", err)}
	}
	// The certificate is checked on its own first, so a problem is blamed
	// on the right file.
	if _, err := firstCertificate(certPEM); err != nil {
		return nil, &FileError{RoleCert, certFile, fmt.Errorf("%s: %w", certFile, err)}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, &FileError{RoleKey, keyFile, fmt.Errorf("the key in %s does not match the certificate in %s", keyFile, certFile)}
		}
		return nil, &FileError{RoleKey, keyFile, fmt.Errorf("%s holds no usable PEM private key (%v)", keyFile, strings.TrimPrefix(err.Error(), "tls: "))}
	}
	return &pair, nil
}

func firstCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("the file holds no PEM certificate")
		}
		if block.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("the certificate cannot be parsed: %w", err)
			}
			return c, nil
		}
	}
}

// LoadCAPool reads a file of PEM CA certificates.
func LoadCAPool(path string) (*x509.CertPool, error) {
	return loadPool(path, RoleClientCA, "the client CA file")
}

func loadPool(path string, role Role, what string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{role, path, fmt.Errorf("%s cannot be read: %w", what, err)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &FileError{role, path, fmt.Errorf("%s holds no PEM certificate", path)}
	}
	return pool, nil
}

// MutualTLS reports whether clients must present a certificate.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCA != "" }

// ServerConfig returns a server configuration offering nextProtos by ALPN
// (e.g. "h2", "http/1.1"): TLS 1.2 at least, the current certificate, and
// with a client CA file, a client certificate required and verified against
// the current CAs.
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	build := func(pool *x509.CertPool) *tls.Config {
		c := &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: r.getCertificate,
			NextProtos:     slices.Clone(nextProtos),
		}
		if r.MutualTLS() {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs = pool
			// A resumed session skips the client certificate's check: with
			// tickets off, a CA taken out of the file refuses its clients
			// on their next connection.
			c.SessionTicketsDisabled = true
		}
		return c
	}
	c := build(r.currentPool())
	if r.MutualTLS() {
		// A CertPool cannot be emptied in place, so each handshake gets a
		// configuration holding the pool of the moment.
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.maybeReload()
			return build(r.currentPool()), nil
		}
	}
	return c
}

func (r *Reloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.maybeReload()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

func (r *Reloader) currentPool() *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pool
}

// maybeReload rereads the files that changed since they were last tried, at
// most once per check interval.
func (r *Reloader) maybeReload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Before(r.nextCheck) {
		return
	}
	r.nextCheck = now.Add(r.every)

	certNow, keyNow := stampOf(r.files.Cert), stampOf(r.files.Key)
	if certNow != r.certSeen || keyNow != r.keySeen {
		r.certSeen, r.keySeen = certNow, keyNow
		if cert, err := LoadKeyPair(r.files.Cert, r.files.Key); err != nil {
			r.log.Error("the TLS certificate files changed but cannot be used; still serving the previous certificate",
				"cert", r.files.Cert, "key", r.files.Key, "error", err.Error())
		} else {
			r.cert = cert
			attrs := []any{"cert", r.files.Cert}
			if cert.Leaf != nil {
				attrs = append(attrs, "not_after", cert.Leaf.NotAfter)
			}
			r.log.Info("TLS certificate reloaded", attrs...)
		}
	}
	if r.files.ClientCA == "" {
		return
	}
	if caNow := stampOf(r.files.ClientCA); caNow != r.caSeen {
		r.caSeen = caNow
		if pool, err := LoadCAPool(r.files.ClientCA); err != nil {
			r.log.Error("the client CA file changed but cannot be used; still verifying clients against the previous CAs",
				"client_ca", r.files.ClientCA, "error", err.Error())
		} else {
			r.pool = pool
			r.log.Info("TLS client CAs reloaded", "client_ca", r.files.ClientCA)
		}
	}
}
