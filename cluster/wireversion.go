package cluster

import (
	"errors"
	"fmt"
)

// WireVersion is the version of everything this build writes between
// nodes: the frames and handshake of cluster/tcp and the encoding of
// Shoal's own messages. Two nodes speak only when their versions are
// equal; the handshake refuses any other with a *WireVersionError on both
// ends. Within a version a message only gains fields at its end, which
// nodes of the same version that predate them skip, so such a change
// rolls through a cluster; anything else bumps the version (see
// docs/DESIGN.md, "Wire"). Version 1 was the JSON wire that carried no
// version in its handshake.
const WireVersion uint32 = 2

// ErrWireVersion is matched by a *WireVersionError.
var ErrWireVersion = errors.New("cluster: peer speaks another wire version")

// WireVersionError refuses a connection between nodes of two wire
// versions: Local is this node's, Peer the other's (1 for a node that
// predates versioned handshakes), Addr the peer's incarnation as it
// named itself or was dialled.
type WireVersionError struct {
	Local, Peer uint32
	Addr        UniqueAddress
}

func (e *WireVersionError) Error() string {
	return fmt.Sprintf("cluster: %s speaks wire version %d, this node %d", e.Addr, e.Peer, e.Local)
}

// Unwrap returns ErrWireVersion.
func (e *WireVersionError) Unwrap() error { return ErrWireVersion }
