package clustertest

import (
	"context"
	"time"

	"github.com/shoal-dev/shoal/examples/payment/readmodel"
)

// readModelBound bounds the wait for the read model after healing: a
// projection instance whose node died waits for its lease to run out
// (10 s), entities recovered in a phase write their timeout after the
// processing timeout (20 s), and the instance's new node must catch up.
const readModelBound = 2 * time.Minute

// CheckReadModel waits, within readModelBound, until the payment read
// model's projection has handled every payment event in the journal (each
// instance's offset at the end of its slices) and its tables equal the
// fold of the journal (readmodel.FoldJournal: the fold the projection's
// handlers use, over the rows in event_journal); it fails the test
// otherwise, saying how they differ.
func (c *Cluster) CheckReadModel(ctx context.Context) {
	c.t.Helper()
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, readModelBound)
	defer cancel()
	if err := readmodel.WaitConsistent(wctx, c.DB, readmodel.ProjectionName, readmodel.Instances, 200*time.Millisecond); err != nil {
		c.t.Errorf("clustertest: %v", err)
		return
	}
	folded, err := readmodel.FoldJournal(ctx, c.DB)
	if err != nil {
		c.t.Errorf("clustertest: %v", err)
		return
	}
	c.t.Logf("read model: caught up and equal to the fold of the journal (%d payments) %v after the check began",
		len(folded), time.Since(began).Round(time.Millisecond))
}
