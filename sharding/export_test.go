package sharding

import (
	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
)

// Settle waits until s's regions have been told of every membership
// change so far, as the in-process cluster does on Join.
func Settle(s *Sharding) { s.settle() }

// MemoryTransport is the tests' in-memory transport, for tests that watch or
// refuse what the nodes send.
type MemoryTransport = memoryTransport

// Transport is what regions and coordinators send and listen through.
type Transport = transport

// NewOver starts sharding on sys as New does, its regions and
// coordinators sending through tr instead of the dispatch over
// cfg.Transport.
func NewOver(sys *entity.System, tr Transport, cfg Config) (*Sharding, error) {
	cfg.transport = tr
	return New(sys, cfg)
}

// NewMemoryTransport returns an empty in-memory transport.
func NewMemoryTransport() *MemoryTransport { return newMemoryTransport() }

// compareShardIDs, for the external tests that check an order.
var CompareShardIDs = compareShardIDs

// RemoteOf is s's dispatch over its cluster transport, for tests that
// hand it messages or read its counters.
func RemoteOf(s *Sharding) *remote.Transport { return s.remote }

// HomesOf is every shard home r knows: shard → node (what the reminders'
// firers learn through package bridge).
func HomesOf[C any](r *Region[C]) map[string]cluster.UniqueAddress { return r.bridged().Homes() }

// Address names a region or a coordinator, for the tests that send to one
// through a test transport.
type Address = address
