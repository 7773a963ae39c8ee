package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/frame"
)

// probeManifest opens a probe: a hello that asks only whether the
// listener would accept this dialler, and is closed once answered.
const probeManifest = "\x00shoal.tcp.probe"

// errProbed ends an accepted probe's connection: not a refusal.
var errProbed = errors.New("tcp: probe answered")

// Probe checks that the transport would talk with to at endpoint: it
// dials it as a link would (with TLS when on, the peer's certificate
// naming to's node id), sends a hello marked as a probe, and returns nil
// once to itself has welcomed it. It returns the dial's or the handshake's
// error otherwise, wrapping ErrRefused for a refusal (another cluster,
// another incarnation at endpoint, a certificate that does not name the
// node). The listener checks the prober as it checks a dialler, but keeps
// no connection and supersedes none. Package node admits a member that
// gossip reports into its views only once Probe passes (docs/DESIGN.md,
// "Members and views").
func (t *Transport) Probe(ctx context.Context, to cluster.UniqueAddress, endpoint string) error {
	cfg := &t.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout+cfg.HandshakeTimeout)
	defer cancel()
	dialer := &net.Dialer{Timeout: cfg.DialTimeout}
	var conn net.Conn
	var err error
	if cfg.ClientTLS != nil {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: cfg.ClientTLS}).DialContext(ctx, "tcp", endpoint)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", endpoint)
	}
	if err != nil {
		return fmt.Errorf("tcp: probe %s at %s: %w", to, endpoint, err)
	}
	defer conn.Close()
	if _, err := t.greet(conn, to, probeManifest); err != nil {
		return fmt.Errorf("tcp: probe %s at %s: %w", to, endpoint, err)
	}
	return nil
}

// answerProbe welcomes a prober that passed the listener's checks.
func (t *Transport) answerProbe(conn net.Conn, hello frame.Frame) error {
	welcome := frame.Frame{From: t.cfg.Self, To: hello.From, Manifest: welcomeManifest, Payload: appendVersioned(nil, t.cfg.wireVersion, nil)}
	conn.SetWriteDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	if err := frame.WriteFrame(conn, welcome, controlMaxSize); err != nil {
		return fmt.Errorf("writing welcome to a probe: %w", err)
	}
	return errProbed
}
