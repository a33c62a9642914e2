#!/usr/bin/env bash
# Builds llama.cpp's llama-server for the tests, text-only, into a cache
# directory: internal/llamaserver/build.sh [DIR]
#
# DIR defaults to $HOME/.cache/openstarry/llama-server-$VERSION. Nothing is
# done when DIR/llama-server is already there and runs. The sources come
# from the npm package node-llama-cpp (llama.cpp as a git bundle), the
# shared libraries (libllama, libllama-common, libggml and its CPU variants)
# prebuilt from @node-llama-cpp/linux-x64 of the same version, so only the
# server's own sources are compiled (-O0, about 90 s on 2 cores), with a
# text-only stand-in for the multimodal library (mtmd_stub.cpp). Needs npm,
# git, cmake, ninja and g++; linux/amd64 only. The tests find the result
# through OPENSTARRY_LLAMA_SERVER or that default path (llamaserver.Path).
set -euo pipefail

VERSION=3.21.1
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${HOME}/.cache/openstarry/llama-server-${VERSION}}"

if [ -x "$out/llama-server" ] && "$out/llama-server" --version >/dev/null 2>&1; then
  echo "llama-server: $out/llama-server (cached)"
  exit 0
fi
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) echo "llama-server: the prebuilt libraries are for linux/x86_64 only, not $(uname -s)/$(uname -m)" >&2; exit 1 ;;
esac
for tool in npm git cmake ninja g++ tar; do
  command -v "$tool" >/dev/null || { echo "llama-server: $tool is missing" >&2; exit 1; }
done

start=$(date +%s)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# The two packages as tarballs: no install scripts, no dependencies.
npm pack --silent "node-llama-cpp@${VERSION}" "@node-llama-cpp/linux-x64@${VERSION}" >/dev/null
mkdir src-pkg lib-pkg
tar -xzf "node-llama-cpp-${VERSION}.tgz" -C src-pkg
tar -xzf "node-llama-cpp-linux-x64-${VERSION}.tgz" -C lib-pkg
libs="$work/lib-pkg/package/bins/linux-x64"
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' src-pkg/package/llama/llama.cpp.info.json)
git -c advice.detachedHead=false clone -q src-pkg/package/llama/gitRelease.bundle llama.cpp

# Configure the whole tree (a second), then compile only the objects the
# server is made of.
cmake -S llama.cpp -B build -G Ninja -Wno-dev \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-O0 -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >cmake.log 2>&1 || { cat cmake.log >&2; exit 1; }
objs=(
  vendor/cpp-httplib/CMakeFiles/cpp-httplib.dir/httplib.cpp.o
  tools/ui/CMakeFiles/llama-ui.dir/ui.cpp.o
  common/CMakeFiles/llama-common-base.dir/build-info.cpp.o
  tools/server/CMakeFiles/llama-server.dir/main.cpp.o
)
for f in server-chat server-task server-queue server-common server-context server-stream server-tools server-mcp server-schema; do
  objs+=("tools/server/CMakeFiles/server-context.dir/$f.cpp.o")
done
for f in server server-http server-models; do
  objs+=("tools/server/CMakeFiles/llama-server-impl.dir/$f.cpp.o")
done
ninja -C build -j "$(nproc)" "${objs[@]}" >ninja.log 2>&1 || { tail -50 ninja.log >&2; exit 1; }
g++ -c -O0 -std=c++17 -Illama.cpp/tools/mtmd -Illama.cpp/include -Illama.cpp/ggml/include \
  "$here/mtmd_stub.cpp" -o build/mtmd_stub.o

# Staged beside the cache and renamed into place, so that two builds at
# once (two CI runs on one machine) leave one whole result.
mkdir -p "$(dirname "$out")"
stage="$(mktemp -d "$(dirname "$out")/.llama-server.XXXXXX")"
cp "$libs"/*.so "$stage/"
(cd build && g++ -o "$stage/llama-server" "${objs[@]}" mtmd_stub.o \
  -L"$libs" -l:libllama-common.so -l:libllama."$tag".so -l:libggml."$tag".so -l:libggml-base.so \
  -pthread -Wl,-rpath,'$ORIGIN')
"$stage/llama-server" --version >/dev/null 2>&1
if [ -e "$out" ] && ! "$out/llama-server" --version >/dev/null 2>&1; then
  rm -rf "$out" # a broken earlier result
fi
mv -T "$stage" "$out" 2>/dev/null || rm -rf "$stage" # another build won
echo "llama-server: built $out/llama-server in $(( $(date +%s) - start )) s"
