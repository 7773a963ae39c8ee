package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/examples/payment/readmodel"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	projectionpg "github.com/shoal-dev/shoal/projection/postgres"
	"github.com/shoal-dev/shoal/sharding/daemon"
)

// The read model's projection: see readmodel.ProjectionName.
const (
	ReadModelName      = readmodel.ProjectionName
	ReadModelInstances = readmodel.Instances
)

// ReadModel answers GET /00/ec/settlements/{walletShopId}: a shop's
// settlements and totals. readmodel.Memory and readmodel.Postgres are ones.
type ReadModel interface {
	Shop(ctx context.Context, k readmodel.ShopKey) (readmodel.Shop, error)
}

// readModel is the node's read model and the projection instances that keep
// it, run as the workers of a daemon (sharding/daemon): on a cluster, each
// instance runs on one node at a time and moves when its node leaves or
// crashes; on a node of its own, all four run here.
type readModel struct {
	model       ReadModel
	projections []*projection.Projection
	daemon      *daemon.Daemon

	mu     sync.Mutex
	closed bool
	runs   sync.WaitGroup
}

// startReadModel builds the read model the journal allows: in Postgres
// (tables of the example's own, an exactly-once projection) when the node
// has a database, else in memory (an at-least-once projection whose
// handler skips what it applied already). A journal that answers no
// queries gets none: the endpoint then answers 503.
func (n *Node) startReadModel(ctx context.Context) error {
	q, ok := n.Journal.(journal.Queries)
	if !ok {
		n.log.Warn("the journal answers no queries: no read model")
		return nil
	}
	rm := &readModel{}
	// Each instance gets a handler of its own: a rebuild clears only
	// its slices.
	var handler func(journal.SliceRange) projection.Handler[readmodel.Change]
	if n.pool != nil {
		pg, err := readmodel.NewPostgres(ctx, n.pool)
		if err != nil {
			return err
		}
		rm.model = pg
		store := projectionpg.NewStore(n.pool)
		handler = func(r journal.SliceRange) projection.Handler[readmodel.Change] {
			return projectionpg.ExactlyOnce(store, pg.Handle, pg.Clear(r))
		}
	} else {
		mem := readmodel.NewMemory()
		rm.model = mem
		store := projection.NewMemoryStore()
		handler = func(r journal.SliceRange) projection.Handler[readmodel.Change] {
			return projection.AtLeastOnce(store, mem.Handle, mem.Clear(r))
		}
	}
	ranges, err := journal.SplitSlices(ReadModelInstances)
	if err != nil {
		return err
	}
	settings := projection.Settings{}
	if n.metrics != nil {
		settings.Registerer = n.metrics
	}
	for _, r := range ranges {
		p, err := projection.New(projection.Config{
			Name: ReadModelName, EntityType: TypeKey.Name(), Slices: r,
			Source: q, Decode: readmodel.Decode, Settings: settings,
		}, handler(r))
		if err != nil {
			return fmt.Errorf("read model: %w", err)
		}
		rm.projections = append(rm.projections, p)
	}
	rm.daemon, err = daemon.Start(n.Sharding, daemon.Config{Name: ReadModelName, Workers: len(rm.projections), Run: rm.run})
	if err != nil {
		return fmt.Errorf("read model: %w", err)
	}
	n.readModel = rm
	return nil
}

// run is daemon worker i's work: projection instance i until ctx ends.
func (rm *readModel) run(ctx context.Context, i int) error {
	rm.mu.Lock()
	if rm.closed {
		rm.mu.Unlock()
		return nil
	}
	rm.runs.Add(1)
	rm.mu.Unlock()
	defer rm.runs.Done()
	return rm.projections[i].Run(ctx)
}

// stop stops the daemon's keep-alives and waits up to wait for runs still
// ending (sharding's shutdown or termination has cancelled them).
func (rm *readModel) stop(wait time.Duration) {
	rm.daemon.Stop()
	rm.mu.Lock()
	rm.closed = true
	rm.mu.Unlock()
	done := make(chan struct{})
	go func() { rm.runs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// Projections are the read model's projection instances on this node (each
// runs here only while its daemon worker lives here); nil without a read
// model.
func (n *Node) Projections() []*projection.Projection {
	if n.readModel == nil {
		return nil
	}
	return n.readModel.projections
}

// settlementBody is one settlement in the shop endpoint's answer.
type settlementBody struct {
	OrderID   string    `json:"orderId"`
	State     string    `json:"state"`
	Amount    int64     `json:"amount"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// shopBody is the shop endpoint's answer.
type shopBody struct {
	WalletShopID string           `json:"walletShopId"`
	Settlements  []settlementBody `json:"settlements"`
	Totals       readmodel.Totals `json:"totals"`
}

// shop answers GET /00/ec/settlements/{walletShopId} from the read model:
// the settlements of the caller's client at the shop, in the header's
// tenant. The read model follows the journal: a settlement shows once its
// projection has handled its events.
func (a *API) shop(w http.ResponseWriter, r *http.Request) {
	principal, tenant, ok := a.validateCaller(w, r)
	if !ok {
		return
	}
	shop := r.PathValue("walletShopId")
	if !validShop(shop) {
		writeFailure(w, ValidationFailure("walletShopId must be 1 to 40 half-width characters"))
		return
	}
	if a.ReadModel == nil {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Code: string(CodeUnpredictable), Message: "no read model on this node"})
		return
	}
	view, err := a.ReadModel.Shop(r.Context(), readmodel.ShopKey{Tenant: string(tenant), ClientID: principal.ClientID, Shop: shop})
	if err != nil {
		a.log().Warn("read model failed", "shop", shop, "err", err)
		writeFailure(w, Unpredictable())
		return
	}
	body := shopBody{WalletShopID: shop, Settlements: make([]settlementBody, 0, len(view.Settlements)), Totals: view.Totals}
	for _, s := range view.Settlements {
		body.Settlements = append(body.Settlements, settlementBody{
			OrderID: s.Key.OrderID, State: string(s.State), Amount: s.Amount, UpdatedAt: s.UpdatedAt.UTC(),
		})
	}
	writeJSON(w, http.StatusOK, body)
}

// readModelStopWait bounds the wait for projection runs at a node's stop.
const readModelStopWait = 5 * time.Second
