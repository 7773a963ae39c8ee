package sharding

import "github.com/shoal-dev/shoal/cluster"

// Settle waits until s's regions have been told of every membership
// change so far, as the in-process cluster does on Join.
func Settle(s *Sharding) { s.settle() }

// MemoryTransport is the in-memory transport, for tests that watch or
// refuse what the nodes send.
type MemoryTransport = memoryTransport

// NewMemoryTransport returns an empty in-memory transport.
func NewMemoryTransport() *MemoryTransport { return newMemoryTransport() }

// compareShardIDs, for the external tests that check an order.
var CompareShardIDs = compareShardIDs

// HomesOf is every shard home r knows: shard → node (what the reminders'
// firers learn through package bridge).
func HomesOf[C any](r *Region[C]) map[string]cluster.UniqueAddress { return r.bridged().Homes() }
