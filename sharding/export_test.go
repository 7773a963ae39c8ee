package sharding

import (
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
)

// Settle waits until s's regions have been told of every membership
// change so far, as the in-process cluster does on Join.
func Settle(s *Sharding) { s.settle() }

// compareShardIDs, for the external tests that check an order.
var CompareShardIDs = compareShardIDs

// RemoteOf is s's dispatch over its cluster transport, for tests that
// hand it messages or read its counters.
func RemoteOf(s *Sharding) *remote.Transport { return s.remote }

// HomesOf is every shard home r knows: shard → node (what the reminders'
// firers learn through package bridge).
func HomesOf[C any](r *Region[C]) map[string]cluster.UniqueAddress { return r.bridged().Homes() }

// Address names a region or a coordinator, for the tests that watch or
// send protocol messages on a cluster/inproc network.
type Address = address

// NewTestNet is newTestNet: a cluster/inproc network for the tests,
// delivered until the test's last cleanup.
var NewTestNet = newTestNet
