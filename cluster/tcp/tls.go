package tcp

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"

	"github.com/shoal-dev/shoal/cluster"
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

// checkCertNamesNode returns an error wrapping ErrRefused unless conn is a
// TLS connection whose peer's leaf certificate lists node among its DNS
// names. It is a no-op without TLS or with AllowAnyNodeCert.
func (t *Transport) checkCertNamesNode(conn net.Conn, peer cluster.UniqueAddress) error {
	if t.cfg.ServerTLS == nil || t.cfg.AllowAnyNodeCert {
		return nil
	}
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return fmt.Errorf("%w: %s: not a TLS connection", ErrRefused, peer)
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 || !slices.Contains(certs[0].DNSNames, peer.Node) {
		return fmt.Errorf("%w: %s: its certificate does not name node %q", ErrRefused, peer, peer.Node)
	}
	return nil
}
