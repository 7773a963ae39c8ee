package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/examples/payment/readmodel"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	projectionpg "github.com/shoal-dev/shoal/projection/postgres"
	"github.com/shoal-dev/shoal/projection/sharded"
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

// readModel is the node's read model and the projection that keeps it,
// run by projection/sharded (workers of a sharding/daemon): on a cluster
// each instance runs on one node at a time, moves when its node leaves or
// crashes, and is listed and operated in the admin API (node.RunProjection);
// on a node of its own all four run here.
type readModel struct {
	model      ReadModel
	projection *sharded.Projection
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
	// Each instance's handler clears only its own slices for a rebuild.
	var (
		store   projection.ControlStore
		handler func(journal.SliceRange) projection.Handler[readmodel.Change]
	)
	if n.pool != nil {
		pg, err := readmodel.NewPostgres(ctx, n.pool)
		if err != nil {
			return err
		}
		pgStore := projectionpg.NewStore(n.pool)
		rm.model, store = pg, pgStore
		handler = func(r journal.SliceRange) projection.Handler[readmodel.Change] {
			return projectionpg.ExactlyOnce(pgStore, pg.Handle, pg.Clear(r))
		}
	} else {
		mem, memStore := readmodel.NewMemory(), projection.NewMemoryStore()
		rm.model, store = mem, memStore
		handler = func(r journal.SliceRange) projection.Handler[readmodel.Change] {
			return projection.AtLeastOnce(memStore, mem.Handle, mem.Clear(r))
		}
	}
	var registerer prometheus.Registerer
	if n.metrics != nil {
		registerer = n.metrics
	}
	cfg := sharded.Config{
		Name: ReadModelName, Instances: ReadModelInstances, Store: store,
		New: func(r journal.SliceRange, holder string) (*projection.Projection, error) {
			return projection.New(projection.Config{
				Name: ReadModelName, EntityType: TypeKey.Name(), Slices: r,
				Source: q, Decode: readmodel.Decode,
				Settings: projection.Settings{Holder: holder, Registerer: registerer},
			}, handler(r))
		},
	}
	var err error
	if n.Cluster != nil {
		rm.projection, err = n.Cluster.RunProjection(cfg)
	} else {
		rm.projection, err = sharded.Start(n.Sharding, cfg)
	}
	if err != nil {
		return fmt.Errorf("read model: %w", err)
	}
	n.readModel = rm
	return nil
}

// ReadModelProjection is the projection that keeps the read model: its
// instances, their status and operations (Rebuild, …) from this node; nil
// without a read model.
func (n *Node) ReadModelProjection() *sharded.Projection {
	if n.readModel == nil {
		return nil
	}
	return n.readModel.projection
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
