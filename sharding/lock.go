package sharding

import (
	"sync"
	"sync/atomic"
)

// lockStripes is how many stripes a regionLock has.
const lockStripes = 16

// regionLock guards a region's routing table. It is a reader/writer lock
// striped over cache lines: the data path read-locks only the stripe of
// its shard, so senders on different cores do not contend for one lock
// word; everything else locks every stripe, in order.
type regionLock struct {
	stripes [lockStripes]struct {
		sync.RWMutex
		_ [64 - 24]byte
	}
	// epoch counts the write locks: what a reader found under the read
	// lock holds while epoch is unchanged (see fastPath). Every Lock
	// starts a new one, so it is at least 1 once anything was written.
	// Read on every fast Tell: on a cache line of its own.
	_     [64]byte
	epoch atomic.Uint64
	_     [64 - 8]byte
}

// stripeOf picks the stripe of a shard.
func stripeOf(shardID string) int { return int(fnv32a(shardID) % lockStripes) }

// RLockShard read-locks the stripe of shardID and returns it for RUnlock.
func (l *regionLock) RLockShard(shardID string) *sync.RWMutex {
	m := &l.stripes[stripeOf(shardID)].RWMutex
	m.RLock()
	return m
}

// TryRLockShard read-locks the stripe of shardID and returns it for
// RUnlock, or returns nil, having locked nothing, when a writer holds the
// stripe or waits for it.
func (l *regionLock) TryRLockShard(shardID string) *sync.RWMutex {
	m := &l.stripes[stripeOf(shardID)].RWMutex
	if !m.TryRLock() {
		return nil
	}
	return m
}

func (l *regionLock) Lock() {
	for i := range l.stripes {
		l.stripes[i].Lock()
	}
	l.epoch.Add(1)
}

func (l *regionLock) Unlock() {
	for i := range l.stripes {
		l.stripes[i].Unlock()
	}
}

func (l *regionLock) RLock() {
	for i := range l.stripes {
		l.stripes[i].RLock()
	}
}

func (l *regionLock) RUnlock() {
	for i := range l.stripes {
		l.stripes[i].RUnlock()
	}
}

// TryLock write-locks every stripe if none is held; for tests.
func (l *regionLock) TryLock() bool {
	for i := range l.stripes {
		if !l.stripes[i].TryLock() {
			for j := range i {
				l.stripes[j].Unlock()
			}
			return false
		}
	}
	l.epoch.Add(1)
	return true
}
