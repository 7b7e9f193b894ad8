"""A minimal MCP server on stdio (JSON-RPC 2.0, one message per line) for the agent tests: one
tool, `fetch_page`, whose result is a caption and a small PNG, as a screenshot tool returns.
Run by the agents themselves (`python tests/mcp_stub.py`); it needs nothing but the standard library."""

from __future__ import annotations

import base64
import json
import struct
import sys
import zlib

CAPTION = "Screenshot of the page: a blue square"


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\x00\x00\xff" * 4 for _ in range(4))
    ihdr = struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _reply(msg_id: object, result: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if method == "initialize":
            version = (msg.get("params") or {}).get("protocolVersion", "2025-06-18")
            _reply(msg_id, {"protocolVersion": version, "capabilities": {"tools": {}},
                            "serverInfo": {"name": "srv", "version": "1"}})  # fmt: skip
        elif method == "tools/list":
            schema = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
            _reply(msg_id, {"tools": [{"name": "fetch_page", "description": "A screenshot of a page.",
                                       "inputSchema": schema}]})  # fmt: skip
        elif method == "tools/call":
            image = base64.b64encode(_png()).decode()
            _reply(msg_id, {"content": [{"type": "text", "text": CAPTION},
                                        {"type": "image", "data": image, "mimeType": "image/png"}]})  # fmt: skip
        elif msg_id is not None:
            _reply(msg_id, {})


if __name__ == "__main__":
    main()
