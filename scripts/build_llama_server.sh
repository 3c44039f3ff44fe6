#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` from the llama.cpp vendored in the pinned llama-cpp-python sdist,
# so the peer runs the very engine sources fucina runs. Output: $FUCINA_CACHE/llama-server-<version>/
# (default ~/.cache/fucina), outside the repository; a finished build is reused. About 5-10 minutes on
# 2 cores, once. Prints the binary's path. Used by `python -m benchmarks.http` (BENCHMARKS.md).
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${FUCINA_CACHE:-$HOME/.cache/fucina}
DEST="$CACHE/llama-server-$VERSION"
BIN="$DEST/build/bin/llama-server"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$DEST"
if [ ! -d "$DEST/src" ]; then
  tmp=$(mktemp -d)
  python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp" >&2
  tar -xzf "$tmp"/llama_cpp_python-"$VERSION".tar.gz -C "$tmp"
  mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$DEST/src.tmp" && mv "$DEST/src.tmp" "$DEST/src"
  rm -rf "$tmp"
fi
# Same CPU options as llama-cpp-python's own build of these sources (native, llamafile sgemm and
# repack on, OpenMP as ggml defaults); no network features.
cmake -S "$DEST/src" -B "$DEST/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$DEST/build" --target llama-server -j "$(nproc)" >&2
echo "$BIN"
