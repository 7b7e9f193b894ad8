"""Errors in the shape of the client's protocol: the protocol a path speaks, error responses, and
what a client learns of an internal or engine failure.
"""

from __future__ import annotations

import json

from starlette.responses import JSONResponse

from chatsieve.protocols.anthropic import ANTHROPIC
from chatsieve.protocols.common import ClientProtocol, RequestError
from chatsieve.protocols.openai_chat import OPENAI_CHAT
from chatsieve.server.backends import BackendError

# Each client API's routes and the protocol that speaks it (errors on unknown sub-paths too).
PROTOCOL_PREFIXES: tuple[tuple[str, ClientProtocol], ...] = (("/v1/messages", ANTHROPIC),)


def protocol_for_path(path: str) -> ClientProtocol:
    """The protocol whose error shape a response on `path` takes (OpenAI's by default)."""
    for prefix, protocol in PROTOCOL_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return protocol
    return OPENAI_CHAT


def refusal_body(path: str, status: int, message: str, code: str) -> bytes:
    """The access checks' refusals (security.py), in the shape of the protocol on `path`."""
    return json.dumps(protocol_for_path(path).error_body(RequestError(message, code=code, status=status))).encode()


def error_response(
    protocol: ClientProtocol, e: RequestError, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(protocol.error_body(e), status_code=e.status, headers=headers)


def internal_error(what: str, request_id: str) -> RequestError:
    return RequestError(f"internal error {what} (request id {request_id})", status=500, type="server_error")


def backend_failure(e: BackendError, request_id: str = "") -> RequestError:
    """What a client learns of an engine failure: that it happened (502), or that the engine
    refused the request (400), and the request id under which the log has the details (which
    may name internal URLs and paths)."""
    rid = request_id or "unknown"
    if e.status in (400, 413, 422):
        return RequestError(
            f"the inference engine refused this request (HTTP {e.status}); the server log has the "
            f"reason under request id {rid}",
            param="messages",
            code="backend_rejected",
        )
    return RequestError(
        f"the inference engine failed on this request; the server log has the details under "
        f"request id {rid}",
        status=502,
        type="server_error",
        code="backend_error",
    )
