#!/usr/bin/env bash
# Builds the SGLang venv for tests/test_sglang_plugin.py, once per SGLang version.
#
# SGLang 0.5.23 pins torch 2.14.1 (the main environment keeps vLLM's CPU torch 2.13), so it gets
# its own venv: requirements/sglang-test.txt installed with pip's ordinary client, --no-deps (see
# the file's header), into
#   ${CHATSIEVE_CACHE:-~/.cache/chatsieve}/sglang-$VERSION/
# A venv already there (marked complete, and importing SGLang's chat server) is reused; the tests
# find it there (or via $CHATSIEVE_SGLANG_PYTHON) and put this checkout on its PYTHONPATH.
# About 6 GB (torch's CUDA libraries); a few minutes with a warm pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${SGLANG_VERSION:-0.5.23}"
CACHE="${CHATSIEVE_CACHE:-$HOME/.cache/chatsieve}"
DEST="$CACHE/sglang-$VERSION"
PY="$DEST/bin/python"
REQ="requirements/sglang-test.txt"
CHECK="import sglang.srt.entrypoints.openai.serving_chat, sglang.srt.parser.template_manager, sglang.srt.server_args"

grep -qx "sglang==$VERSION" "$REQ" || { echo "sglang.sh: $REQ does not pin sglang==$VERSION" >&2; exit 1; }
if [ -f "$DEST/.complete" ] && cmp -s "$REQ" "$DEST/.complete" && "$PY" -W ignore -c "$CHECK" 2>/dev/null; then
    echo "sglang $VERSION: reusing $DEST"
    exit 0
fi

# a venv is not relocatable: built in place, marked complete (with the pins it holds) at the end
rm -rf "$DEST"
mkdir -p "$CACHE"
echo "sglang $VERSION: building $DEST"
start=$(date +%s)
python -m venv "$DEST"
"$PY" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ"
"$PY" -W ignore -c "$CHECK"
cp "$REQ" "$DEST/.complete"
echo "sglang $VERSION: installed in $(( $(date +%s) - start ))s, $(du -sh "$DEST" | cut -f1)"
