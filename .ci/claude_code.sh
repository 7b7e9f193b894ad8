#!/usr/bin/env bash
# Installs Claude Code (npm @anthropic-ai/claude-code) for the end-to-end tests, once per version,
# into ${CHATSIEVE_CACHE:-~/.cache/chatsieve}/claude-code-$VERSION (reused when its claude runs).
# The tests find it there (or via $CHATSIEVE_CLAUDE). Needs node and npm.
set -euo pipefail

VERSION="${CLAUDE_CODE_VERSION:-2.1.328}"
CACHE="${CHATSIEVE_CACHE:-$HOME/.cache/chatsieve}"
DEST="$CACHE/claude-code-$VERSION"
BIN="$DEST/node_modules/.bin/claude"

if [ -x "$BIN" ] && DISABLE_AUTOUPDATER=1 "$BIN" --version >/dev/null 2>&1; then
    echo "claude-code $VERSION: reusing $BIN"
    exit 0
fi
command -v npm >/dev/null || { echo "claude_code.sh: npm is required to install Claude Code" >&2; exit 1; }
mkdir -p "$DEST"
echo "claude-code $VERSION: installing into $DEST"
npm install --prefix "$DEST" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$VERSION"
DISABLE_AUTOUPDATER=1 "$BIN" --version
