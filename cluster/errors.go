package cluster

import "errors"

// ErrInvalidConfig is returned (wrapped) for configuration a component
// cannot use: a missing required field, a setting out of range, an empty
// name or node id. It is the one sentinel for that meaning in every
// cluster package: cluster/tcp, cluster/inproc, cluster/memberlist and
// cluster/lease export it under the same name, so errors.Is matches it
// whichever package refused.
var ErrInvalidConfig = errors.New("cluster: invalid config")
