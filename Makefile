# The one command that runs the whole test suite: `make test`.
# It needs redis-server/redis-cli and a PostgreSQL server; scripts/ensure-test-deps.sh
# checks for them and installs the Redis packages on Debian when run as root.

GO ?= go
GOFLAGS_TEST ?= -race -count=1 -timeout 30m

.PHONY: test test-short deps fmt-check vet lint bench run fuzz-short image

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

test: deps fmt-check vet lint
	$(GO) test $(GOFLAGS_TEST) ./...
	@scripts/fuzz-short.sh

# The fast tier, for while you work: every test that needs no server
# (under -short the tests that start Redis or use PostgreSQL skip), in under
# a minute. `make test` stays the full suite, and what CI runs.
test-short:
	$(GO) test -short -count=1 ./...

# Every fuzz target for FUZZTIME (default 10000x: inputs) past its committed seeds.
fuzz-short:
	@scripts/fuzz-short.sh

deps:
	@scripts/ensure-test-deps.sh

fmt-check:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi

vet:
	$(GO) vet ./...

# staticcheck clean, and go.mod/go.sum exactly what the code needs.
lint:
	$(GO) run $(STATICCHECK) ./...
	$(GO) mod tidy -diff

# Benchmarks of both stores, with their same-run references (see BENCHMARKS.md).
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./memory/ ./redis/

run:
	$(GO) run ./cmd/sluice serve

# The container image (Dockerfile), stamped with the git version and revision.
# Needs a Docker engine, so it is not part of `make test`; there the Dockerfile's
# shape is checked by deploy/deploy_test.go. IMAGE=registry/sluice:tag to name it.
IMAGE ?= sluice:dev
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) .
