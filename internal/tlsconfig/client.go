package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// ClientFiles are the TLS settings of a connection Sluice makes (to Redis,
// to an xDS server): CA, client certificate and key for mutual TLS, the name
// the server's certificate must carry, and whether to skip that name check.
type ClientFiles struct {
	// CA holds the CA certificates the server's must chain to; "" is the
	// system's pool.
	CA string
	// Cert and Key, both or neither, are the client certificate presented
	// to a server that asks for one.
	Cert, Key string
	// ServerName is the name checked against the server's certificate; ""
	// is the host dialled.
	ServerName string
	// SkipHostnameVerification still verifies the server's chain against
	// CA, but not its name: for servers reached by an address their
	// certificate does not carry (envoyproxy/ratelimit's
	// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostnameVerification bool
}

// ClientConfig reads the files and returns the client configuration: TLS
// 1.2 at least. Errors are FileErrors naming the file at fault.
func ClientConfig(f ClientFiles) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a client certificate and its key go together: give both, or neither")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pool, err := loadPool(f.CA, RoleCA, "the CA file")
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if f.Cert != "" {
		pair, err := LoadKeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{*pair}
	}
	if f.SkipHostnameVerification {
		// crypto/tls verifies the chain and the name together, or neither:
		// turn both off, and verify the chain here.
		roots := c.RootCAs
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the server presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}
