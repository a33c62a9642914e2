#!/usr/bin/env bash
# Builds the static openstarry binary.
#   ./build.sh                 host build into bin/openstarry
#   ./build.sh matrix          every release target into dist/
set -euo pipefail
cd "$(dirname "$0")"

VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo none)}
DATE=${DATE:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
LDFLAGS="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}"
export CGO_ENABLED=0

build() { # GOOS GOARCH GOARM OUT
  GOOS=$1 GOARCH=$2 GOARM=$3 go build -trimpath -ldflags "$LDFLAGS" -o "$4" ./cmd/openstarry
  echo "built $4 ($1/$2${3:+ v$3})"
}

case "${1:-host}" in
  host)
    build "$(go env GOOS)" "$(go env GOARCH)" "" bin/openstarry
    ;;
  matrix)
    mkdir -p dist
    build linux amd64 "" dist/openstarry-linux-amd64
    build linux arm64 "" dist/openstarry-linux-arm64
    build linux arm 7 dist/openstarry-linux-armv7
    build linux arm 6 dist/openstarry-linux-armv6
    build windows amd64 "" dist/openstarry-windows-amd64.exe
    build windows arm64 "" dist/openstarry-windows-arm64.exe
    ;;
  *)
    echo "usage: $0 [host|matrix]" >&2; exit 2
    ;;
esac
