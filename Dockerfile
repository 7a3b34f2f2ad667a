# syntax=docker/dockerfile:1
#
# The sluice binary in a minimal, non-root image.
#
#   make image                       # docker build with VERSION and REVISION from git
#   docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) -t sluice .
#   docker run --rm -p 8080:8080 sluice          # sluice serve on the embedded defaults
#
# See docs/deploy.md. The image runs as UID/GID 65532 (distroless "nonroot").

# ---- build: a static binary, no cgo (the SQLite driver is pure Go) ----
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# -buildvcs=false: .git is not in the build context (see .dockerignore); the
# revision comes in as a build argument instead.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/sluice ./cmd/sluice

# ---- run: CA certificates, tzdata, /etc/passwd with nonroot, nothing else ----
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="Distributed rate limiter: HTTP check API, admin API, Envoy rate limit service" \
      org.opencontainers.image.source="https://github.com/sluicelabs/sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/sluice /usr/local/bin/sluice
# The same binary where envoyproxy/ratelimit's image has its own: Envoy
# Gateway, Istio's and Contour's samples and ENV's compose file start the
# rate limit service with command ["/bin/ratelimit"]. Started under that name
# it runs in ENV mode (docs/envoy.md). A copy, not a symlink: distroless has
# no shell to make one, and a COPY'd symlink depends on the base's /bin.
COPY --from=build /out/sluice /bin/ratelimit
# The default SQLite catalog (./sluice.db, used only without --database) lands
# in the non-root user's home; production uses --database postgres://...
WORKDIR /home/nonroot
USER 65532:65532
# 8080: --addr (check, admin, /healthz, /readyz); 8081: --grpc-addr (Envoy);
# 9090: --metrics-addr. Only --addr is on by default; pass the others.
EXPOSE 8080 8081 9090
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
