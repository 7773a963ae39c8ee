// Package sharded runs a projection's instances across a cluster and
// operates them from any node (docs/DESIGN.md, "The read side").
//
// Start splits the slices into Instances ranges (journal.SplitSlices) and
// runs one worker per range on sharding/daemon, so each instance runs on
// one node at a time, moves when its node leaves and starts elsewhere
// after a crash. A worker builds the instance's projection.Projection with
// the caller's factory and runs it; a Run that returns (the lease still
// held by a crashed holder: projection.ErrInstanceHeld, fenced, or a
// policy stop) is run again after the daemon's back-off. The daemon gives
// placement; the projection's lease in the store gives safety: while a
// moving instance's old run still holds the lease, the new one is refused
// and retries.
//
// Operations and status go through the store (projection.ControlStore),
// not to the node that runs an instance: Pause, Resume, Reset and Rebuild
// queue a request that the instance's holder applies at its next
// heartbeat (within LeaseTTL/3), and Status reads every instance's row
// with its holder's last report. Routing them to the worker entity with
// an Ask would answer at once, but only while the worker runs: a request
// to an instance between two homes, or held back by its lease, would
// fail, and a pause could not outlive a crash. Through the store, any node
// operates every instance, including one that runs nowhere now, and the
// same fencing that guards the offset guards the operations.
package sharded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/daemon"
)

// Config describes a sharded projection. Every node that runs it starts
// it with the same Name and Instances.
type Config struct {
	// Name is the projection's name (projection.Config.Name).
	Name string
	// Instances is how many instances split the slices.
	Instances int
	// New builds the instance of the range slices. The projection's
	// Config must have this Name and Slices, its handler's store must be
	// Store, and its Settings.Holder must be holder (the node's name and
	// an id of this Start, which Status shows as the instance's holder).
	// It is called for every run of the instance on this node.
	New func(slices journal.SliceRange, holder string) (*projection.Projection, error)
	// Store is where the instances' offsets live: the store of the
	// handlers New builds. Status and the operations use it.
	Store projection.ControlStore
	// Role restricts the instances to members with this role.
	Role string
	// KeepAliveInterval, RestartBackoff and StopTimeout tune the daemon
	// (see daemon.Config); zero takes its defaults.
	KeepAliveInterval time.Duration
	RestartBackoff    time.Duration
	StopTimeout       time.Duration
}

// ErrInvalidConfig means a Config is unusable.
var ErrInvalidConfig = errors.New("sharded: invalid config")

// Projection is a sharded projection's part on one node.
type Projection struct {
	cfg       Config
	instances []projection.Instance
	holder    string
	daemon    *daemon.Daemon

	mu      sync.Mutex
	running map[int]*projection.Projection // worker -> the run on this node
}

// Start runs the projection's instances on s's cluster: this node takes
// its share of them. Stop it before the node shuts down, or let the
// shutdown hand the instances off.
func Start(s *sharding.Sharding, cfg Config) (*Projection, error) {
	if cfg.Name == "" || cfg.Instances <= 0 || cfg.New == nil || cfg.Store == nil {
		return nil, fmt.Errorf("%w: want a Name, Instances > 0, New and Store (got %q, %d)", ErrInvalidConfig, cfg.Name, cfg.Instances)
	}
	ranges, err := journal.SplitSlices(cfg.Instances)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, cfg.Name, err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	p := &Projection{cfg: cfg, holder: s.Node().String() + "#" + hex.EncodeToString(id[:]), running: map[int]*projection.Projection{}}
	for _, r := range ranges {
		inst := projection.Instance{Name: cfg.Name, Slices: r}
		if err := inst.Validate(); err != nil {
			return nil, err
		}
		p.instances = append(p.instances, inst)
	}
	p.daemon, err = daemon.Start(s, daemon.Config{
		Name: "projection-" + cfg.Name, Workers: cfg.Instances, Run: p.run, Role: cfg.Role,
		KeepAliveInterval: cfg.KeepAliveInterval, RestartBackoff: cfg.RestartBackoff, StopTimeout: cfg.StopTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("sharded %s: %w", cfg.Name, err)
	}
	return p, nil
}

// Stop ends this node's part in keeping the instances alive; instances
// running here go on until they move or the node stops.
func (p *Projection) Stop() { p.daemon.Stop() }

// Name is the projection's name.
func (p *Projection) Name() string { return p.cfg.Name }

// Holder is the lease holder name this node's runs use.
func (p *Projection) Holder() string { return p.holder }

// Instances are the projection's instances, by range.
func (p *Projection) Instances() []projection.Instance {
	return append([]projection.Instance(nil), p.instances...)
}

// run is worker i's work: build instance i and run it until ctx ends.
func (p *Projection) run(ctx context.Context, i int) error {
	want := p.instances[i]
	pr, err := p.cfg.New(want.Slices, p.holder)
	if err != nil {
		return fmt.Errorf("sharded %s: build %s: %w", p.cfg.Name, want, err)
	}
	if pr.Instance() != want {
		return fmt.Errorf("%w: New built %s for %s", ErrInvalidConfig, pr.Instance(), want)
	}
	p.mu.Lock()
	p.running[i] = pr
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.running, i)
		p.mu.Unlock()
	}()
	return pr.Run(ctx)
}

// Local returns the status of the instances running on this node, as
// their runners see it now.
func (p *Projection) Local() []projection.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []projection.Status
	for i := range p.instances {
		if pr := p.running[i]; pr != nil {
			out = append(out, pr.Status())
		}
	}
	return out
}

// Status returns every instance's stored state, by range, wherever it
// runs; an instance that never ran has only its Instance set.
func (p *Projection) Status(ctx context.Context) ([]projection.InstanceState, error) {
	stored, err := p.cfg.Store.Instances(ctx, p.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("sharded %s: status: %w", p.cfg.Name, err)
	}
	byInst := make(map[projection.Instance]projection.InstanceState, len(stored))
	for _, st := range stored {
		byInst[st.Instance] = st
	}
	out := make([]projection.InstanceState, len(p.instances))
	for i, inst := range p.instances {
		st, ok := byInst[inst]
		if !ok {
			st = projection.InstanceState{Instance: inst, Report: projection.Report{LagEvents: -1}}
		}
		out[i] = st
	}
	return out, nil
}

// Instance finds one of the projection's instances by its range
// ("min-max", as in its key) or its index; ErrUnknownInstance otherwise.
func (p *Projection) Instance(id string) (projection.Instance, error) {
	for i, inst := range p.instances {
		if id == strconv.Itoa(i) || id == fmt.Sprintf("%d-%d", inst.Slices.Min, inst.Slices.Max) {
			return inst, nil
		}
	}
	return projection.Instance{}, fmt.Errorf("%w: %s has no instance %q (want an index below %d or a range min-max)",
		projection.ErrUnknownInstance, p.cfg.Name, id, len(p.instances))
}

// Pause asks inst's holder to pause it; the pause outlives restarts until
// Resume.
func (p *Projection) Pause(ctx context.Context, inst projection.Instance) (projection.Request, error) {
	return p.request(ctx, inst, projection.OpPause, journal.Offset{})
}

// Resume asks inst's holder to resume it.
func (p *Projection) Resume(ctx context.Context, inst projection.Instance) (projection.Request, error) {
	return p.request(ctx, inst, projection.OpResume, journal.Offset{})
}

// Reset asks inst's holder to move its offset to to (see
// projection.Projection.Reset).
func (p *Projection) Reset(ctx context.Context, inst projection.Instance, to journal.Offset) (projection.Request, error) {
	return p.request(ctx, inst, projection.OpReset, to)
}

// Rebuild asks inst's holder to clear the read model and handle every
// event again (see projection.Projection.Rebuild).
func (p *Projection) Rebuild(ctx context.Context, inst projection.Instance) (projection.Request, error) {
	return p.request(ctx, inst, projection.OpRebuild, journal.Offset{})
}

func (p *Projection) request(ctx context.Context, inst projection.Instance, kind projection.OpKind, to journal.Offset) (projection.Request, error) {
	if _, err := p.Instance(fmt.Sprintf("%d-%d", inst.Slices.Min, inst.Slices.Max)); err != nil || inst.Name != p.cfg.Name {
		return projection.Request{}, fmt.Errorf("%w: %s is not an instance of %s", projection.ErrUnknownInstance, inst, p.cfg.Name)
	}
	q, err := p.cfg.Store.Request(ctx, inst, kind, to)
	if err != nil {
		return projection.Request{}, fmt.Errorf("sharded %s: %s %s: %w", p.cfg.Name, kind, inst, err)
	}
	return q, nil
}

// HolderNode is the node part of a holder name Start made ("node#id").
func HolderNode(holder string) string {
	if i := strings.LastIndexByte(holder, '#'); i >= 0 {
		return holder[:i]
	}
	return holder
}
