package node

import (
	"time"

	"github.com/shoal-dev/shoal/cluster/lease"
	journalmemory "github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
	snapshotmemory "github.com/shoal-dev/shoal/snapshot/memory"
	remindermemory "github.com/shoal-dev/shoal/timers/reminder/memory"
)

// MemoryStores are the stores of a node in memory mode (Config.Memory):
// everything a node otherwise keeps in Postgres, held in this process.
//
// Memory mode promises less than Postgres, and is for trying Shoal out,
// examples and tests:
//   - nothing is durable: the events, snapshots, shard allocations,
//     remembered entities and node leases end with the process;
//   - the stores live in one process, so only nodes of that process can
//     share them: give every node of an in-process cluster the same
//     MemoryStores; nodes in other processes cannot join a memory-mode
//     cluster usefully (their entities would see other histories, and
//     their coordinators other allocations and leases);
//   - the admin API lists no leases.
//
// Membership (memberlist) and the transport (TCP) are the real ones, on
// the addresses configured (loopback by default).
type MemoryStores struct {
	Journal      *journalmemory.Journal
	Snapshots    *snapshotmemory.Store
	Coordinators *sharding.MemoryCoordinatorStore
	Remember     *sharding.MemoryRememberStore
	Leases       *lease.MemoryStore
	// Reminders is the journal's side store (journalmemory.WithSideStore),
	// so that an effect's reminders go in with its events.
	Reminders *remindermemory.Store
}

// NewMemoryStores returns empty stores, for one node or for every node of
// a cluster in one process.
func NewMemoryStores() *MemoryStores {
	reminders := remindermemory.New()
	return &MemoryStores{
		Reminders:    reminders,
		Journal:      journalmemory.New(journalmemory.WithSideStore(reminders)),
		Snapshots:    snapshotmemory.New(),
		Coordinators: sharding.NewMemoryCoordinatorStore(),
		Remember:     sharding.NewMemoryRememberStore(),
		Leases:       lease.NewMemoryStore(time.Now),
	}
}
