# One command runs every test: `make test`. It builds the local Postgres image
# the integration tests need when the machine cannot pull one.
GO ?= go

.PHONY: test run bench

run:
	$(GO) run ./examples/payment

test:
	./scripts/postgres-image.sh
	$(GO) vet ./...
	$(GO) test -race -timeout 40m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
