# One command runs every test: `make test`. It builds the local Postgres image
# the integration tests need when the machine cannot pull one, and installs
# Chromium for the shard-map browser test when it is missing;
# SHOAL_REQUIRE_BROWSER=1 makes that test fail rather than skip without it.
GO ?= go

.PHONY: test test-cluster run bench experiment cluster-up cluster-down

run:
	$(GO) run ./examples/payment

test:
	./scripts/postgres-image.sh
	./scripts/chromium.sh
	$(GO) vet ./...
	SHOAL_REQUIRE_BROWSER=1 $(GO) test -race -timeout 40m ./...

# Every multi-node fault scenario of examples/payment/clustertest, with real
# processes in containers (make test runs the fast core set: crash failover
# and partition, each with the linearizability check).
test-cluster:
	./scripts/postgres-image.sh
	SHOAL_CLUSTER_TESTS=all $(GO) test -count=1 -timeout 60m -v ./examples/payment/clustertest/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The coordinator-avoidance proposal's rolling-update experiment (least-shard
# vs coordinator-avoidance):
# prints the stop-window table and where the plots are.
experiment:
	./scripts/rolling-update-experiment.sh

# The payment example as a 3-node cluster in containers (README: "Run a 3-node cluster").
cluster-up:
	./scripts/cluster-up.sh

cluster-down:
	./scripts/cluster-down.sh
