# The two commands of the quick start: `make run` and `make test`.
# `make test` is also CI's entry (.ci/run): lint, verify, then every test.
GO ?= go
GOFMT ?= gofmt
BIN := bin/modelplane

.PHONY: run test lint verify build generate bench deps deps-test images

# Builds leave the clone's directory out of what they compile, so a fresh
# clone (CI's) reuses the build, vet and staticcheck caches of the clone
# before it: on the 2-core machine a warm `make test` compiles in 2 min
# instead of 3.5, and staticcheck takes 1 s instead of 1 min.
export GOFLAGS := -trimpath $(GOFLAGS)

# dev's nodes enroll with their own tokens: the shared MP_AGENT_TOKEN,
# which reads every artifact, is never passed on.
run: deps build
	env -u MP_AGENT_TOKEN ./$(BIN) dev

test: deps-test lint verify
	$(GO) test -race -count=1 -timeout 20m ./...

# lint: formatting, vet (the client's binary also for macOS and Windows),
# staticcheck and the import directions of DESIGN.md section 3
# (internal/arch). Generated *_templ.go are gofmt-clean, so nothing is
# excluded.
lint:
	@out=$$($(GOFMT) -l .); if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./cmd/modelplane
	GOOS=windows GOARCH=amd64 $(GO) vet ./cmd/modelplane
	$(GO) tool staticcheck ./...
	$(GO) test -count=1 -run TestImportDirections ./internal/arch

# verify: the committed sqlc and templ code matches queries/, migrations/
# and web/*.templ (sqlc diff; templ generated in a scratch copy).
verify:
	./scripts/check-generated.sh

build:
	$(GO) build -o $(BIN) ./cmd/modelplane

# images: modelplane's container image as OCI and docker archives in
# bin/images, built without a daemon or a pulled base (scripts/images.sh).
images: deps
	./scripts/images.sh bin/images

generate:
	$(GO) tool sqlc generate
	$(GO) tool templ generate -path web

# Each benchmark's JSON line is also kept in $(BENCH_OUT); a failing one does
# not stop the others, and the summary's table ends the run (failing when a
# benchmark printed nothing).
BENCH_OUT ?= bin/bench.jsonl
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -o pipefail -c
bench: deps build
	@: > $(BENCH_OUT)
	-./$(BIN) bench api --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench engine --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench placement --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench ingest --json | tee -a $(BENCH_OUT)
	./scripts/bench-proxies.sh
	-./$(BIN) bench gateway --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench rollback --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench chargeback --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench pages --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench drift --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench runtime --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench autoscale --json | tee -a $(BENCH_OUT)
	-./$(BIN) bench llm --json | tee -a $(BENCH_OUT)
	@./$(BIN) bench summary --results $(BENCH_OUT) | grep -v '^{'

deps:
	./scripts/install-deps.sh

deps-test:
	./scripts/install-deps.sh test
