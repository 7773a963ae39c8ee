package node

import "log/slog"

// warnInsecure logs a WARN for each part of the node's traffic that goes
// in the clear: the transport without mutual TLS (entity messages and
// replies, readable and forgeable by anyone on the network) and gossip
// without a SecretKey (anyone who reaches the gossip port can join). Both
// are fine on loopback in tests; in a deployment they are a mistake to
// notice at once.
func warnInsecure(log *slog.Logger, c Config) {
	if c.ServerTLS == nil || c.ClientTLS == nil {
		log.Warn("node: the transport is plaintext: set ServerTLS and ClientTLS (the payment node's -tls-cert, -tls-key, -tls-ca) for mutual TLS",
			"transport", c.TransportAddr)
	}
	if len(c.SecretKey) == 0 {
		log.Warn("node: gossip is not encrypted: set SecretKey (the payment node's -gossip-key) so that only nodes holding the key can join",
			"gossip", c.GossipAddr)
	}
}
