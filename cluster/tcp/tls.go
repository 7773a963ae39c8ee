package tcp

import (
	"crypto/tls"
	"crypto/x509"
)

// MutualTLS returns the ServerTLS and ClientTLS of a node that presents
// cert and trusts the peers whose certificates roots signed: each side
// verifies the other, TLS 1.3 only.
func MutualTLS(cert tls.Certificate, roots *x509.CertPool) (server, client *tls.Config) {
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    roots,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
	}
	return server, client
}
