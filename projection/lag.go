package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/shoal-dev/shoal/journal"
)

// EventCounter is the journal's optional counting of events after an
// offset (the memory and Postgres journals have it). LagEvents uses it.
type EventCounter = journal.EventCounter

// LagEvents is how many events of the instance's range are stored after
// the offset it handled up to; errors.ErrUnsupported when the source is
// no EventCounter. It asks the source each time: an admin call, not one
// for every scrape.
func (p *Projection) LagEvents(ctx context.Context) (int64, error) {
	counter, ok := p.cfg.Source.(EventCounter)
	if !ok {
		return 0, fmt.Errorf("projection %s: lag in events: %T counts no events: %w", p.inst, p.cfg.Source, errors.ErrUnsupported)
	}
	st := p.Status()
	off := st.Offset
	if !st.Running {
		stored, _, err := p.store.Offset(ctx, p.inst)
		if err != nil {
			return 0, err
		}
		off = stored
	}
	n, err := counter.CountEventsBySlices(ctx, p.cfg.EntityType, p.cfg.Slices, off)
	if err != nil {
		return 0, fmt.Errorf("projection %s: lag in events: %w", p.inst, err)
	}
	return n, nil
}
