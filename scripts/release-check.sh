#!/usr/bin/env bash
# The release build on this machine's target, as `make release` builds every
# one (.goreleaser.yaml): goreleaser's check of the configuration, then a
# snapshot release of one target into a temporary dist, and a look at what it
# made: the archive with the binary and the licence, a checksum file that
# verifies, a CycloneDX SBOM naming the binary's modules, and a binary that
# reports the snapshot's version. goreleaser and cyclonedx-gomod on PATH
# (make release-tools puts them there).
set -euo pipefail
cd "$(dirname "$0")/.."

dist="$(mktemp -d)"
top="$dist"
trap 'rm -rf "$top"' EXIT

goreleaser check -q
# The same configuration with its target matrix narrowed to this machine's
# (goreleaser's release has no --single-target), so one build is made.
goos="$(go env GOOS)" goarch="$(go env GOARCH)"
sed -e "s/^    goos: .*/    goos: [$goos]/" -e "s/^    goarch: .*/    goarch: [$goarch]/" .goreleaser.yaml >"$dist/goreleaser.yaml"
grep -q "goos: \[$goos\]" "$dist/goreleaser.yaml" && grep -q "goarch: \[$goarch\]" "$dist/goreleaser.yaml" ||
	{ echo "release-check: .goreleaser.yaml has no goos/goarch lines to narrow" >&2; exit 1; }
# --snapshot needs no tag; validate is skipped for a tree with changes.
goreleaser release --snapshot --clean --skip=publish,validate --config "$dist/goreleaser.yaml" \
	--parallelism 2 >"$dist/log" 2>&1 || { cat "$dist/log" >&2; exit 1; }
mv dist "$dist/out"
dist="$dist/out"

fail() { echo "release-check: $*" >&2; ls -l "$dist" >&2; exit 1; }
archive="$(ls "$dist"/sluice_*_"$(go env GOOS)"_"$(go env GOARCH)".tar.gz 2>/dev/null | head -1)"
[ -n "$archive" ] || fail "no archive for $(go env GOOS)/$(go env GOARCH)"
sums="$(ls "$dist"/sluice_*_checksums.txt 2>/dev/null | head -1)"
[ -n "$sums" ] || fail "no checksum file"
(cd "$dist" && sha256sum --check --quiet --ignore-missing "$(basename "$sums")") || fail "checksums do not verify"
grep -q "$(basename "$archive")" "$sums" || fail "the archive has no checksum"
sbom="$(ls "$dist"/sluice_*.cdx.json 2>/dev/null | head -1)"
[ -n "$sbom" ] || fail "no SBOM"
grep -q '"bomFormat": *"CycloneDX"' "$sbom" || fail "the SBOM is not CycloneDX"
grep -q 'pkg:golang/github.com/redis/rueidis' "$sbom" || fail "the SBOM does not list the binary's modules"
mkdir "$dist/x"
tar -xzf "$archive" -C "$dist/x"
for f in sluice LICENSE NOTICE; do [ -f "$dist/x/$f" ] || fail "the archive lacks $f"; done
"$dist/x/sluice" version | grep -q -- '-snapshot' || fail "the binary does not report the snapshot version: $("$dist/x/sluice" version)"
echo "release-check: $(basename "$archive"), its checksum and SBOM: ok"
