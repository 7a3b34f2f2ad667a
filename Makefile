# The one command that runs the whole test suite: `make test`.
# It needs redis-server/redis-cli and a PostgreSQL server; scripts/ensure-test-deps.sh
# checks for them and installs the Redis packages on Debian when run as root.

GO ?= go
GOFLAGS_TEST ?= -race -count=1 -timeout 30m

.PHONY: test deps fmt-check vet lint bench run fuzz-short

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

test: deps fmt-check vet lint
	$(GO) test $(GOFLAGS_TEST) ./...
	@scripts/fuzz-short.sh

# Every fuzz target for FUZZTIME (default 5s) past its committed seeds.
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
