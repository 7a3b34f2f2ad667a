package tlsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Names are what the operator calls a listener's three files (the flags
// --tls-cert, --tls-key, --tls-client-ca), so errors say what to fix.
type Names struct{ Cert, Key, ClientCA string }

func (n Names) of(role Role) string {
	switch role {
	case RoleCert:
		return n.Cert
	case RoleKey:
		return n.Key
	default:
		return n.ClientCA
	}
}

// Check says whether files are a complete set (or none), before any is
// read: a certificate needs its key, and a client CA needs a certificate.
func (files Files) Check(names Names) error {
	switch {
	case files.Cert != "" && files.Key == "":
		return fmt.Errorf("%s is set but %s is not: give the certificate's private key too", names.Cert, names.Key)
	case files.Cert == "" && files.Key != "":
		return fmt.Errorf("%s is set but %s is not: give the key's certificate too", names.Key, names.Cert)
	case files.Cert == "" && files.ClientCA != "":
		return fmt.Errorf("%s verifies client certificates, which needs TLS: set %s and %s too", names.ClientCA, names.Cert, names.Key)
	}
	return nil
}

// Load is New for a listener whose TLS is optional: nil when files name no
// certificate, and errors that start with the name of the file at fault.
func Load(files Files, names Names, opts Options) (*Reloader, error) {
	if files.Cert == "" {
		return nil, nil
	}
	r, err := New(files, opts)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("%s: %w", names.of(fe.Role), err)
		}
		return nil, err
	}
	return r, nil
}

// Mode says, for logs, how a listener of r is served: off (r is nil), on,
// or mutual.
func Mode(r *Reloader) string {
	switch {
	case r == nil:
		return "off"
	case r.MutualTLS():
		return "mutual"
	default:
		return "on"
	}
}

// HTTPConfig is the TLS configuration of an HTTP listener (HTTP/2 and
// HTTP/1.1); nil when r is, so TLS is off.
func HTTPConfig(r *Reloader) *tls.Config {
	if r == nil {
		return nil
	}
	return r.ServerConfig("h2", "http/1.1")
}

// ServeHTTP serves srv on ln, over TLS when srv has a TLS configuration
// (HTTPConfig), so callers need not branch on whether TLS is on.
func ServeHTTP(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// RequireClientSAN makes c refuse a client certificate that does not carry
// san as a DNS name (as envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN does), on
// top of the CA check c already makes. It returns c.
func RequireClientSAN(c *tls.Config, san string) *tls.Config {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
			return fmt.Errorf("the client certificate is not for %q (--grpc-tls-client-san): %w", san, err)
		}
		return nil
	}
	c.VerifyConnection = verify
	if next := c.GetConfigForClient; next != nil {
		// The reloading configuration builds one per handshake: check there.
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := next(hello)
			if cc != nil {
				cc.VerifyConnection = verify
			}
			return cc, err
		}
	}
	return c
}
