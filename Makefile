# The two commands of the quick start: `make run` and `make test`.
# `make test` is also CI's entry (.ci/run): lint, verify, then every test.
GO ?= go
GOFMT ?= gofmt
BIN := bin/modelplane

.PHONY: run test lint verify build generate bench deps deps-test

# dev's nodes enroll with their own tokens: the shared MP_AGENT_TOKEN,
# which reads every artifact, is never passed on.
run: deps build
	env -u MP_AGENT_TOKEN ./$(BIN) dev

test: deps-test lint verify
	$(GO) test -race -count=1 -timeout 20m ./...

# lint: formatting, vet, staticcheck and the import directions of
# DESIGN.md section 3 (internal/arch). Generated *_templ.go are gofmt-clean,
# so nothing is excluded.
lint:
	@out=$$($(GOFMT) -l .); if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) test -count=1 -run TestImportDirections ./internal/arch

# verify: the committed sqlc and templ code matches queries/, migrations/
# and web/*.templ (sqlc diff; templ generated in a scratch copy).
verify:
	./scripts/check-generated.sh

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
	./$(BIN) bench runtime --json
	./$(BIN) bench autoscale --json
	./$(BIN) bench llm --json

deps:
	./scripts/install-deps.sh

deps-test:
	./scripts/install-deps.sh test
