# The two commands of the quick start: `make run` and `make test`.
GO ?= go
BIN := bin/modelplane

.PHONY: run test build generate bench deps deps-test

run: deps build
	./$(BIN) dev

test: deps-test
	./scripts/check-generated.sh
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) test -race -count=1 -timeout 20m ./...

build:
	$(GO) build -o $(BIN) ./cmd/modelplane

generate:
	$(GO) tool sqlc generate
	$(GO) tool templ generate -path web

bench: deps build
	./$(BIN) bench api --json
	./$(BIN) bench engine --json
	./$(BIN) bench placement --json
	./$(BIN) bench ingest --json
	./scripts/bench-proxies.sh
	./$(BIN) bench gateway --json
	./$(BIN) bench rollback --json
	./$(BIN) bench chargeback --json
	./$(BIN) bench drift --json

deps:
	./scripts/install-deps.sh

deps-test:
	./scripts/install-deps.sh test
