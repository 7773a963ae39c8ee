package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The handshake's payloads carry the wire version (cluster.WireVersion).
// A hello is the version marker (a NUL byte), the dialler's version as a
// uvarint, and the cluster name; a welcome is the marker and the
// listener's version; a refusal the marker, the version and the reason.
//
// Version 1 had no version: its hello's payload was the cluster name
// alone, its refusal's the reason alone. A payload that does not start
// with the marker is of version 1 (a cluster name never starts with NUL),
// and a node of version 1 refuses a hello of a later one at once, its
// payload not being its cluster name: so the two always refuse each
// other, and each end can say why.
const versionMarker = 0

// errBadHello: a hello or an answer whose version does not parse.
var errBadHello = errors.New("tcp: malformed handshake payload")

func appendVersioned(dst []byte, version uint32, rest []byte) []byte {
	dst = append(dst, versionMarker)
	dst = binary.AppendUvarint(dst, uint64(version))
	return append(dst, rest...)
}

// parseVersioned splits a handshake payload into the sender's wire
// version and the rest: version 1, the whole payload, for one without the
// marker.
func parseVersioned(p []byte) (version uint32, rest []byte, err error) {
	if len(p) == 0 || p[0] != versionMarker {
		return 1, p, nil
	}
	v, n := binary.Uvarint(p[1:])
	if n <= 0 || v < 2 || v > 1<<31 {
		return 0, nil, fmt.Errorf("%w: version %x", errBadHello, p[1:min(len(p), 11)])
	}
	return uint32(v), p[1+n:], nil
}
