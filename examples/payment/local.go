package main

// This file stands in for sharding until sharding.Init exists: one process,
// entities spawned on demand, passivation and graceful stop through the
// stop message. Replace it with
//
//	payments := sharding.Init(node, sharding.Entity[Command]{
//		Key: TypeKey, Create: p.Create, StopMessage: StopActor{},
//	})
//
// whose EntityRefFor satisfies Entities.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/shoal-dev/shoal/entity"
)

// Entities resolves payment entities by id; sharding provides it in production.
type Entities interface {
	RefFor(entityID string) entity.Ref[Command]
}

// ErrShuttingDown is returned by Tell once Shutdown has begun.
var ErrShuttingDown = errors.New("payment: entities shutting down")

// LocalEntities runs every entity in this process. It is the entities'
// owner, as a shard is: Passivate sends the entity its stop message and
// buffers the entity's new mail until it has stopped, then starts a new
// incarnation for that mail.
type LocalEntities struct {
	sys   *entity.System
	props *entity.Props[Command]
	log   *slog.Logger

	mu     sync.Mutex
	live   map[string]*incarnation
	closed bool
}

type incarnation struct {
	cell     *entity.Cell[Command]
	stopping bool      // StopActor sent: new mail waits in buffer
	buffer   []Command // mail for the next incarnation
}

// NewLocalEntities runs entities built by create on sys.
func NewLocalEntities(sys *entity.System, create func(entity.Context[Command]) entity.Behavior[Command]) *LocalEntities {
	l := &LocalEntities{sys: sys, log: sys.Logger(), live: make(map[string]*incarnation)}
	l.props = &entity.Props[Command]{Key: TypeKey, Create: create, Owner: l}
	return l
}

// RefFor implements Entities.
func (l *LocalEntities) RefFor(entityID string) entity.Ref[Command] {
	return localRef{l: l, id: entityID}
}

type localRef struct {
	l  *LocalEntities
	id string
}

func (r localRef) System() *entity.System { return r.l.sys }

func (r localRef) Tell(msg Command) error { return r.l.tell(r.id, msg) }

func (l *LocalEntities) tell(id string, msg Command) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("%w: %s", ErrShuttingDown, id)
	}
	inc := l.live[id]
	if inc == nil {
		inc = &incarnation{cell: entity.Spawn(l.sys, l.props, id)}
		l.live[id] = inc
	}
	if inc.stopping {
		inc.buffer = append(inc.buffer, msg)
		return nil
	}
	if err := inc.cell.Tell(msg); err != nil {
		if !errors.Is(err, entity.ErrStopped) {
			return err
		}
		// It stopped by itself and Stopped has not run yet: keep the
		// message for the incarnation Stopped starts.
		inc.stopping = true
		inc.buffer = append(inc.buffer, msg)
	}
	return nil
}

// Passivate implements entity.Owner: it sends the stop message, which the
// entity may stash until its work is done.
func (l *LocalEntities) Passivate(c *entity.Cell[Command]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inc := l.live[c.EntityID()]; inc != nil && inc.cell == c && !inc.stopping {
		inc.stopping = true
		_ = c.Tell(StopActor{})
	}
}

// Stopped implements entity.Owner: it forgets c, and starts a new
// incarnation if mail arrived while c was stopping.
func (l *LocalEntities) Stopped(c *entity.Cell[Command], err error) {
	if err != nil {
		l.log.Error("payment entity failed", "entity_id", c.EntityID(), "err", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	inc := l.live[c.EntityID()]
	if inc == nil || inc.cell != c {
		return
	}
	delete(l.live, c.EntityID())
	if len(inc.buffer) == 0 || l.closed {
		return
	}
	next := &incarnation{cell: entity.Spawn(l.sys, l.props, c.EntityID())}
	l.live[c.EntityID()] = next
	for _, m := range inc.buffer {
		_ = next.cell.Tell(m)
	}
}

// Len is how many entities are alive.
func (l *LocalEntities) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.live)
}

// Shutdown hands every entity off as a rebalance would: it refuses new
// mail, sends each entity its stop message and waits until all have
// stopped. An entity waiting for the issuer stops once it has its answer or
// its processing timeout. When ctx ends first the rest are stopped at once.
func (l *LocalEntities) Shutdown(ctx context.Context) error {
	cells := l.close(func(inc *incarnation) {
		if !inc.stopping {
			inc.stopping = true
			_ = inc.cell.Tell(StopActor{})
		}
	})
	for _, c := range cells {
		select {
		case <-c.Done():
		case <-ctx.Done():
			l.Kill()
			return fmt.Errorf("payment: shutdown: %w", ctx.Err())
		}
	}
	return nil
}

// Kill stops every entity at once, without the stop message, as a crash
// would; an entity waiting for the issuer is left in its processing state
// in the journal.
func (l *LocalEntities) Kill() {
	for _, c := range l.close(func(*incarnation) {}) {
		c.StopNow()
		<-c.Done()
	}
}

func (l *LocalEntities) close(each func(*incarnation)) []*entity.Cell[Command] {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	cells := make([]*entity.Cell[Command], 0, len(l.live))
	for _, inc := range l.live {
		each(inc)
		cells = append(cells, inc.cell)
	}
	return cells
}
