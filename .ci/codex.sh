#!/usr/bin/env bash
# Installs the Codex CLI (npm @openai/codex) for the Codex end-to-end tests, once per version.
#
# Installed with npm's ordinary client into
#   ${CHATSIEVE_CACHE:-~/.cache/chatsieve}/codex-$VERSION/node_modules/.bin/codex
# An install already there is reused; the tests find it there (or via $CHATSIEVE_CODEX).
# Needs node >= 18 and npm.
set -euo pipefail

VERSION="${CODEX_VERSION:-0.169.0}"
CACHE="${CHATSIEVE_CACHE:-$HOME/.cache/chatsieve}"
DEST="$CACHE/codex-$VERSION"
BIN="$DEST/node_modules/.bin/codex"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "codex $VERSION: reusing $BIN"
    exit 0
fi
command -v npm >/dev/null || { echo "codex.sh: npm is required to install @openai/codex" >&2; exit 1; }

WORK="$DEST.tmp.$$"
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
echo "codex $VERSION: installing @openai/codex@$VERSION from npm"
npm install --prefix "$WORK" --no-audit --no-fund --loglevel=error "@openai/codex@$VERSION" >&2
"$WORK/node_modules/.bin/codex" --version
rm -rf "$DEST"
mv "$WORK" "$DEST"  # atomic: a half-installed tree is never "present"
"$BIN" --version
echo "codex $VERSION: installed $BIN"
