#!/usr/bin/env bash
# Builds the static openstarry binary, the release and its packages.
#   ./build.sh                 host build into bin/openstarry
#   ./build.sh matrix          every release binary into $DIST, checked
#   ./build.sh release         matrix, the small builds and the .debs into
#                              $DIST, checked, then SHA256SUMS signed with
#                              $RELEASE_KEY and verified
#   ./build.sh sizes [TARGET [TAGS]]
#                              the bytes of one binary (the host's by
#                              default) by module and by package, from its
#                              symbol table (packaging/sizes/sizes.awk)
#
# Every binary: CGO_ENABLED=0, -trimpath, stripped, version/commit/date
# stamped. A binary that is not static, or that is less than $HEADROOM_MIB
# under its budget ($MAX_MIB, $SMALL_MAX_MIB for the small builds on
# Linux, $SMALL_WINDOWS_MAX_MIB for a small Windows build), fails the
# build: the headroom is what the next features grow into, so that a
# budget is met with room to spare, not by the last few kilobytes.
#
# Environment (all optional but RELEASE_KEY for release):
#   DIST           output directory (dist)
#   HEADROOM_MIB   how far under its budget every binary must stay (1)
#   SIZES_TOP      how many packages build.sh sizes lists (30)
#   TARGETS        GOOS/GOARCH[/GOARM] list of the standard builds
#   SMALL_TARGETS  the same for the small (bbolt-only) builds
#   SMALL_TAGS     build tags of the small builds (nosqlite,noredis,nofile,no_mcp,nohub,nethttpomithttp2)
#   DEB_ARCHS      Debian architectures to package (amd64 arm64 armhf armel)
#   RELEASE_KEY    ed25519 private key (PREFIX.key of openstarry templates
#                  keygen); PREFIX.pub beside it is used to verify
#   VERSION COMMIT DATE  stamped into the binaries (from git by default)
#   DEB_VERSION    the packages' version (derived from VERSION)
#   DEB_MAINTAINER the packages' Maintainer field
#   OPENSTARRY     a host openstarry binary to sign with (built if unset)
set -euo pipefail
cd "$(dirname "$0")"

VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo none)}
DATE=${DATE:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
LDFLAGS="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}"
export CGO_ENABLED=0

DIST=${DIST:-dist}
TARGETS=${TARGETS-linux/amd64 linux/arm64 linux/arm/7 linux/arm/6 linux/arm/5 windows/amd64 windows/arm64}
SMALL_TARGETS=${SMALL_TARGETS-linux/arm64 linux/arm/7 linux/arm/6}
# The small build leaves out SQLite (the sqlite:// store, the fts:// memory
# engine and session continuity: about 4 MiB), Redis, the file store, and
# the MCP client (under 64 KiB; MCP servers are programs a small board
# does not run anyway) and the enrolment hub (the operator's side, which
# runs beside the fleet's broker; 64 KiB), and speaks HTTP/1.1 only: the
# standard library's nethttpomithttp2 leaves out net/http's HTTP/2 (0.5
# MiB), which nothing of a board needs (its HTTP API is plain HTTP, and
# model servers, webhooks and the design server all speak HTTP/1.1).
SMALL_TAGS=${SMALL_TAGS:-nosqlite,noredis,nofile,no_mcp,nohub,nethttpomithttp2}
DEB_ARCHS=${DEB_ARCHS-amd64 arm64 armhf armel}
MAX_MIB=${MAX_MIB:-20}
HEADROOM_MIB=${HEADROOM_MIB:-1}
# The standard builds measure 15.7 to 17.0 MiB (windows/amd64, the
# largest: 3 MiB of headroom). The small Linux builds measure 10.6 MiB
# (arm64) and 10.95 MiB (armv6, armv7); a small Windows build (the PE
# format, the service manager), which the tests run under wine, 11.9 MiB.
# Their budgets were 11 and 12 MiB, set when they measured 10.4-10.6 and
# 11.5 MiB; what every build gained since (the fleet, self-update, memory
# engines, webhooks) left them 35 to 100 KiB under, and what is left in
# them is what a board runs (./build.sh sizes linux/arm/7 $SMALL_TAGS:
# the runtime, net/http and crypto/tls for the hub and model servers,
# the broker, paho, bbolt, the schema validator, the YAML config). The
# small budgets are therefore 1.5 MiB higher, 12.5 and 13.5 MiB: the 1 MiB
# of headroom every build keeps, and half a MiB (5%) for the features that
# come before anyone looks again. They stay 4 to 5 MiB under a standard
# build, which is what the small build is for (no SQLite, Redis, file
# store, MCP, hub, HTTP/2).
SMALL_MAX_MIB=${SMALL_MAX_MIB:-12.5}
SMALL_WINDOWS_MAX_MIB=${SMALL_WINDOWS_MAX_MIB:-13.5}
NFPM_MODULE=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
DEB_MAINTAINER=${DEB_MAINTAINER:-OpenStarry Edge <openstarry-edge@users.noreply.github.com>}

TOOLS=$(mktemp -d)
trap 'rm -rf "$TOOLS"' EXIT

# name PREFIX GOOS/GOARCH[/GOARM] prints the file name of a binary:
# openstarry-linux-armv7, openstarry-small-linux-arm64, openstarry-windows-amd64.exe.
name() {
  local prefix=$1 os arch arm
  IFS=/ read -r os arch arm <<<"$2"
  local n="$prefix-$os-${arch}${arm:+v$arm}"
  [ "$os" = windows ] && n="$n.exe"
  echo "$n"
}

# build TARGET OUT [TAGS]
#
# 32-bit ARM binaries align their segments to 4 KiB pages (-R 4096) instead
# of the linker's 64 KiB: 32-bit ARM Linux only has 4 KiB pages, and the
# padding was 128 KiB of every armv5/6/7 binary. arm64 keeps 64 KiB, since
# arm64 kernels with 16 KiB pages (the Raspberry Pi 5's) or 64 KiB pages
# exist.
build() {
  local os arch arm ld=$LDFLAGS
  IFS=/ read -r os arch arm <<<"$1"
  [ "$arch" = arm ] && ld="$ld -R 4096"
  GOOS=$os GOARCH=$arch GOARM=$arm go build -trimpath ${3:+-tags "$3"} -ldflags "$ld" -o "$2" ./cmd/openstarry
  echo "built $2 ($os/$arch${arm:+ v$arm}${3:+, tags $3})"
}

checkbin() { # MAX_MIB FILE...
  [ -x "$TOOLS/checkbin" ] || go build -o "$TOOLS/checkbin" ./packaging/checkbin
  "$TOOLS/checkbin" -headroom "$HEADROOM_MIB" -max "$@"
}

matrix() {
  mkdir -p "$DIST"
  local t std=() small=() smallwin=()
  for t in $TARGETS; do
    build "$t" "$DIST/$(name openstarry "$t")"
    std+=("$DIST/$(name openstarry "$t")")
  done
  for t in $SMALL_TARGETS; do
    build "$t" "$DIST/$(name openstarry-small "$t")" "$SMALL_TAGS"
    case $t in
      windows/*) smallwin+=("$DIST/$(name openstarry-small "$t")") ;;
      *) small+=("$DIST/$(name openstarry-small "$t")") ;;
    esac
  done
  echo "sizes (static, each at least $HEADROOM_MIB MiB under its budget):"
  local ok=0
  [ ${#std[@]} -eq 0 ] || checkbin "$MAX_MIB" "${std[@]}" || ok=1
  [ ${#small[@]} -eq 0 ] || checkbin "$SMALL_MAX_MIB" "${small[@]}" || ok=1
  [ ${#smallwin[@]} -eq 0 ] || checkbin "$SMALL_WINDOWS_MAX_MIB" "${smallwin[@]}" || ok=1
  return $ok
}

# sizes [TARGET [TAGS]] prints the bytes of a binary by module and by
# package. The binary is built as the release builds it but with its
# symbol table (no -s -w), which go tool nm reads; the stripped binary is
# the sum less the symbol table and DWARF.
sizes() {
  local t=${1:-$(go env GOOS)/$(go env GOARCH)} tags=${2:-} os arch arm ld="-X main.version=${VERSION}"
  IFS=/ read -r os arch arm <<<"$t"
  [ "$arch" = arm ] && ld="$ld -R 4096"
  GOOS=$os GOARCH=$arch GOARM=$arm go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ld" -o "$TOOLS/sized" ./cmd/openstarry
  GOOS=$os GOARCH=$arch GOARM=$arm go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ld -s -w" -o "$TOOLS/stripped" ./cmd/openstarry
  echo "$t${tags:+ (tags $tags)}: $(stat -c %s "$TOOLS/stripped") bytes stripped, as released"
  go tool nm -size -sort address "$TOOLS/sized" | awk -v top="${SIZES_TOP:-30}" -f packaging/sizes/sizes.awk
}

# debVersion turns a git describe into a Debian version: v1.2.0 -> 1.2.0,
# v1.2.0-3-gabc123 -> 1.2.0+git3.abc123, an untagged abc123 -> 0.0.0+gitabc123.
debVersion() {
  local v=${VERSION#v} dirty=""
  case "$v" in *-dirty) v=${v%-dirty}; dirty="+dirty" ;; esac
  if [[ "$v" =~ ^([0-9][0-9A-Za-z.~+]*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
    echo "${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}$dirty"
  elif [[ "$v" =~ ^[0-9][0-9A-Za-z.~+]*$ ]]; then
    echo "$v$dirty"
  else
    echo "0.0.0+git${COMMIT}$dirty" | tr -c '0-9A-Za-z.~+\n' '.'
  fi
}

# debs packages the binaries of $DIST for each Debian architecture.
debs() {
  local deb_version=${DEB_VERSION:-$(debVersion)}
  [ -x "$TOOLS/nfpm" ] || GOBIN="$TOOLS" go install "$NFPM_MODULE"
  local stage="$TOOLS/stage"
  mkdir -p "$stage"
  # The package's configuration is the shipped file with the service's
  # data directory.
  sed 's|^data: ./data$|data: /var/lib/openstarry|' configs/openstarry.yaml >"$stage/openstarry.yaml"
  grep -q '^data: /var/lib/openstarry$' "$stage/openstarry.yaml" || { echo "configs/openstarry.yaml has no 'data: ./data' line" >&2; exit 1; }
  printf 'openstarry (%s) unstable; urgency=medium\n\n  * Release %s (commit %s).\n\n -- %s  %s\n' \
    "$deb_version" "$VERSION" "$COMMIT" "$DEB_MAINTAINER" "$(date -u -R)" | gzip -9n >"$stage/changelog.gz"
  local a target
  for a in $DEB_ARCHS; do
    case $a in
      amd64) target=linux/amd64 ;;
      arm64) target=linux/arm64 ;;
      # Raspberry Pi OS's armhf is ARMv6 with VFP (Pi Zero, Pi 1), Debian's
      # ARMv7: the ARMv6 binary runs on both. Debian's armel is ARMv5TE
      # without an FPU: GOARM=5 (software floating point).
      armhf) target=linux/arm/6 ;;
      armel) target=linux/arm/5 ;;
      *) echo "unknown Debian architecture $a" >&2; exit 2 ;;
    esac
    local bin="$DIST/$(name openstarry "$target")"
    [ -f "$bin" ] || { echo "$bin is missing: build $target (TARGETS) before packaging $a" >&2; exit 1; }
    # nfpm expands the environment in the package's fields, not in the
    # paths of its contents: those are filled in here.
    sed -e "s|\${DEB_BINARY}|$bin|g" -e "s|\${DEB_STAGE}|$stage|g" packaging/deb/nfpm.yaml >"$stage/nfpm-$a.yaml"
    DEB_ARCH=$a DEB_VERSION=$deb_version DEB_MAINTAINER=$DEB_MAINTAINER \
      "$TOOLS/nfpm" package --config "$stage/nfpm-$a.yaml" --packager deb --target "$DIST/openstarry_${deb_version}_${a}.deb" >/dev/null
    echo "packaged $DIST/openstarry_${deb_version}_${a}.deb ($(stat -c %s "$DIST/openstarry_${deb_version}_${a}.deb") bytes)"
  done
}

sign() {
  if [ -z "${RELEASE_KEY:-}" ]; then
    echo "RELEASE_KEY is not set: the release is signed with the fleet's ed25519 key." >&2
    echo "  RELEASE_KEY=fleet.key make release   (make a key: openstarry templates keygen --out fleet)" >&2
    exit 1
  fi
  local os=${OPENSTARRY:-}
  if [ -z "$os" ]; then
    os="$TOOLS/openstarry"
    CGO_ENABLED=0 go build -o "$os" ./cmd/openstarry
  fi
  "$os" sign-release --key "$RELEASE_KEY" "$DIST"
  local pub=${RELEASE_KEY%.key}.pub
  if [ -f "$pub" ]; then
    "$os" verify-release --key "$pub" "$DIST" | tail -1
  fi
}

case "${1:-host}" in
  host)
    # Said before the build, which prints nothing while it works: the first
    # one, with an empty module and build cache, takes a minute or two.
    echo "build.sh: building bin/openstarry (the first build downloads the modules and compiles everything: 1-2 minutes; later ones take seconds)" >&2
    build "$(go env GOOS)/$(go env GOARCH)" bin/openstarry
    ;;
  matrix)
    matrix
    ;;
  sizes)
    sizes "${2:-}" "${3:-}"
    ;;
  release)
    if [ -z "${RELEASE_KEY:-}" ]; then sign; fi # fail before building
    rm -f "$DIST"/openstarry[-_]* "$DIST"/SHA256SUMS*
    matrix
    debs
    sign
    ;;
  debs)
    debs
    ;;
  *)
    echo "usage: $0 [host|matrix|release|debs|sizes [TARGET [TAGS]]]" >&2; exit 2
    ;;
esac
