//go:build !linux

package tcp

import "net"

// ackDelayer does nothing here: the option it sets is Linux's.
type ackDelayer struct{}

func newAckDelayer(net.Conn) ackDelayer { return ackDelayer{} }

func (*ackDelayer) beforeRead() {}
