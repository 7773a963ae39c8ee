# One command runs every test: `make test`. It builds the local Postgres image
# the integration tests need when the machine cannot pull one.
GO ?= go

.PHONY: test test-cluster run bench cluster-up cluster-down

run:
	$(GO) run ./examples/payment

test:
	./scripts/postgres-image.sh
	$(GO) vet ./...
	$(GO) test -race -timeout 40m ./...

# Every multi-node fault scenario of examples/payment/clustertest, with real
# processes in containers (make test runs the fast core set: crash failover
# and partition, each with the linearizability check).
test-cluster:
	./scripts/postgres-image.sh
	SHOAL_CLUSTER_TESTS=all $(GO) test -count=1 -timeout 60m -v ./examples/payment/clustertest/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The payment example as a 3-node cluster in containers (README: "Run a 3-node cluster").
cluster-up:
	./scripts/cluster-up.sh

cluster-down:
	./scripts/cluster-down.sh
