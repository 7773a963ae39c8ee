# One command runs every test: `make test`. It checks that the main module
# has no test-only dependency, builds the local Postgres image the
# integration tests need when the machine cannot pull one, installs Chromium
# for the shard-map browser test when it is missing
# (SHOAL_REQUIRE_BROWSER=1 makes that test fail rather than skip without
# it), checks the alert rules of docs/operations with promtool
# (scripts/promtool.sh installs it when missing; SHOAL_REQUIRE_PROMTOOL=1
# makes the dashboard test fail rather than skip without it), and runs go
# vet and go test -race in every module: the main one and the nested ones
# that hold the test-, experiment- and browser-only dependencies
# (scripts/each-module.sh lists them).
GO ?= go

.PHONY: test test-cluster run bench experiment cluster-up cluster-down

run:
	$(GO) run ./examples/payment

test:
	./scripts/check-module-hygiene.sh
	./scripts/postgres-image.sh
	./scripts/chromium.sh
	./scripts/promtool.sh check rules docs/operations/prometheus-alerts.yml
	./scripts/promtool.sh test rules docs/operations/prometheus-alerts.test.yml
	./scripts/each-module.sh $(GO) vet ./...
	SHOAL_REQUIRE_BROWSER=1 SHOAL_REQUIRE_PROMTOOL=1 ./scripts/each-module.sh $(GO) test -race -timeout 40m ./...

# Every multi-node fault scenario of examples/payment/clustertest, with real
# processes in containers (make test runs the fast core set: crash failover
# and partition, each with the linearizability check).
test-cluster:
	./scripts/postgres-image.sh
	cd examples/payment/clustertest && SHOAL_CLUSTER_TESTS=all GOWORK=off $(GO) test -count=1 -timeout 60m -v ./...

bench:
	./scripts/each-module.sh $(GO) test -run '^$$' -bench . -benchmem ./...

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
