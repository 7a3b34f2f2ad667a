# The one command that runs the whole test suite: `make test`.
# It needs redis-server/redis-cli and a PostgreSQL server; scripts/ensure-test-deps.sh
# checks for them and installs the Redis packages on Debian when run as root.

GO ?= go
GOFLAGS_TEST ?= -race -count=1 -timeout 30m

.PHONY: test test-short deps fmt-check vet lint bench run fuzz-short image image-release release release-snapshot release-check release-tools

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GORELEASER ?= github.com/goreleaser/goreleaser/v2@v2.15.1
CYCLONEDX ?= github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0

test: deps fmt-check vet lint release-check
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

# Releases (.goreleaser.yaml): static binaries for linux and darwin on amd64
# and arm64, SHA-256 checksums and a CycloneDX SBOM per binary, in dist/.
# The tools are built from their pinned modules into bin/tools.
TOOLS := $(CURDIR)/bin/tools
release-tools:
	@GOBIN=$(TOOLS) GOFLAGS= $(GO) install $(GORELEASER)
	@GOBIN=$(TOOLS) GOFLAGS= $(GO) install $(CYCLONEDX)

# On a tag vX.Y.Z, with GITHUB_TOKEN: build and publish the GitHub release.
release: release-tools
	PATH="$(TOOLS):$$PATH" $(TOOLS)/goreleaser release --clean

# Every target, from any commit, nothing published.
release-snapshot: release-tools
	PATH="$(TOOLS):$$PATH" $(TOOLS)/goreleaser release --snapshot --clean --skip=publish

# In `make test`, so the release cannot rot: the configuration checked, and
# the release build of this machine's target, its archive, checksum and
# SBOM made and verified (scripts/release-check.sh).
release-check: release-tools
	@PATH="$(TOOLS):$$PATH" scripts/release-check.sh

# The multi-arch image (linux/amd64 and linux/arm64) from the Dockerfile,
# pushed to IMAGE, labelled with the tag; the release workflow runs it.
image-release:
	docker buildx build --platform linux/amd64,linux/arm64 --push \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) .
