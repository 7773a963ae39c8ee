//go:build linux

package tcp

import (
	"crypto/tls"
	"net"
	"syscall"
	"time"
)

// ackDelayer keeps an accepted connection's socket delaying its ACKs
// (docs/DESIGN.md, "Transport"). A link carries data one way only, so
// Linux, which delays ACKs only on connections it finds interactive (data
// sent soon after data received), answers every small frame with an ACK
// of its own: sent when the reader drains the socket, one more loopback
// packet for both ends to process, the cost of a read growing fivefold.
// Delayed, the ACK goes out once per two segments' worth of data, or when
// the kernel's delayed-ACK timer (40 ms at least) fires; the kernel leaves
// the delaying mode when that timer fires, so the reader puts the socket
// back into it before a read, at most once per rearmAcks.
type ackDelayer struct {
	raw   syscall.RawConn // nil: not a TCP socket, nothing to do
	armed time.Time
}

// rearmAcks is how often a connection's reader puts its socket back into
// the delaying mode: well under the kernel's shortest delayed-ACK timeout,
// the earliest it can have left that mode.
const rearmAcks = 10 * time.Millisecond

func newAckDelayer(conn net.Conn) ackDelayer {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return ackDelayer{}
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return ackDelayer{}
	}
	return ackDelayer{raw: raw}
}

// beforeRead arms the delaying mode if rearmAcks has passed since it last
// did. A socket the option fails on keeps answering at once, as before.
func (a *ackDelayer) beforeRead() {
	if a.raw == nil {
		return
	}
	now := time.Now()
	if now.Sub(a.armed) < rearmAcks {
		return
	}
	a.armed = now
	_ = a.raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 0)
	})
}
