"""Access control for `chatsieve serve`: an ASGI middleware in front of the app.

Per request, in order: a request id (`X-Request-Id`), the `Host` allow-list (DNS rebinding),
who is calling (`identify`: the API key in either header; constant-time, every route but the open
ones), `application/json` for bodies (CSRF from browsers), and the body size and read time (read
here, replayed to the app). The caller is handed to the app in the scope (`caller_of`): the
response store's owner, the prompt cache's partition and the access log all take it from there.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("chatsieve.server")
access_log = logging.getLogger("chatsieve.access")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
REQUEST_ID_KEY = "chatsieve.request_id"
CALLER_KEY = "chatsieve.caller"
# what a key is hashed with for the caller's id (the response store's owner column, which it
# predates: rows stored by earlier versions keep their owner)
_CALLER_SALT = b"chatsieve-response-store\x00"


def key_id(api_key: str | None) -> str:
    """A caller's id: a salted SHA-256 of its API key ("" for none), never the key itself."""
    if not api_key:
        return ""
    return hashlib.sha256(_CALLER_SALT + api_key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who is calling: the API key the request was let in with (on a server without keys, the one
    it presented, if any). `id` is what the response store, the prompt cache and the log know it
    by; the key itself is never stored or logged."""

    key: str | None = field(default=None, repr=False)  # never in a log line, even by accident

    @property
    def id(self) -> str:
        return key_id(self.key)

    @property
    def label(self) -> str:
        """The caller in a log line: `key:` and the id's first 12 hex digits, or `-`."""
        return f"key:{self.id[:12]}" if self.key else "-"


ANONYMOUS = Caller()
TWO_KEYS = "two different API keys"


def _presented(authorization: bytes | None, x_api_key: bytes | None) -> list[str]:
    """The keys a request presents: `Authorization: Bearer KEY`, then `x-api-key: KEY`."""
    out = []
    if authorization is not None:
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            out.append(token.strip())
    if x_api_key is not None and x_api_key.strip():
        out.append(x_api_key.decode("latin-1").strip())
    return out


def identify(authorization: bytes | None, x_api_key: bytes | None,
             keys: tuple[bytes, ...] = ()) -> Caller | str:
    """Who is calling, from the two headers that may carry an API key; or why the request is
    refused. With `keys` (the SHA-256 digests of the server's keys), the caller is the key that
    matched (compared in constant time, every candidate against every key); a request with no
    matching key, or with two different matching keys, is refused. Without keys, the caller is
    the first key presented (Bearer before x-api-key), or anonymous."""
    candidates = _presented(authorization, x_api_key)
    if not keys:
        return Caller(candidates[0]) if candidates else ANONYMOUS
    matched: list[str] = []
    for token in candidates:
        given = hashlib.sha256(token.encode("latin-1")).digest()
        ok = False
        for key in keys:  # no early exit: every key is compared
            ok |= hmac.compare_digest(given, key)
        if ok:
            matched.append(token)
    if not matched:
        return "invalid or missing API key: send the header 'Authorization: Bearer <key>' (or 'x-api-key: <key>')"
    if len(set(matched)) > 1:
        return f"{TWO_KEYS} in one request (Authorization and x-api-key): send one"
    return Caller(matched[0])


def caller_of(scope: Scope) -> Caller:
    """The caller `SecurityMiddleware` identified for this request (anonymous without it)."""
    caller = scope.get(CALLER_KEY)
    if isinstance(caller, Caller):
        return caller
    headers = _headers(scope)
    found = identify(headers.get(b"authorization"), headers.get(b"x-api-key"))
    return found if isinstance(found, Caller) else ANONYMOUS


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bind_host: str) -> tuple[str, ...] | None:
    """The Host names accepted by default: the loopback names (and the bound name), or any
    (None) when bound to every interface, where the public name is not known."""
    if bind_host in ("0.0.0.0", "::", ""):
        return None
    return tuple(dict.fromkeys((*LOOPBACK_HOSTS, bind_host.strip("[]").lower())))


def key_problem(key: str) -> str | None:
    """Why `key` cannot be an API key (None if it can): an empty key would let an empty
    `Authorization: Bearer` in, and a key with spaces or control characters can never be sent."""
    if not key:
        return "an API key may not be empty (an empty key would accept 'Authorization: Bearer' with no token)"
    if not all("!" <= ch <= "~" for ch in key):
        return "an API key must be printable ASCII without spaces"
    return None


@dataclass(frozen=True)
class SecurityPolicy:
    api_keys: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS  # None or "*": any Host
    max_body_bytes: int = 4 * 1024 * 1024
    body_timeout: float = 30.0  # seconds to receive a whole body
    open_paths: frozenset[str] = frozenset({"/health"})  # no API key needed


def log_safe(text: str, limit: int = 300) -> str:
    """Request-controlled text as it may appear in a log line: control and non-ASCII characters
    escaped (a decoded %0A cannot start a forged line), cut to `limit` characters."""
    cut = text[:limit]
    out = json.dumps(cut)[1:-1].replace("\x7f", "\\u007f")
    return out + ("..." if len(text) > limit else "")


def redacted_query(query: bytes) -> str:
    """A query string for the log: its parameter names, never their values (keys and tokens are
    sometimes sent there)."""
    if not query:
        return ""
    from urllib.parse import parse_qsl

    names = [k for k, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True)]
    return "?" + "&".join(f"{log_safe(k, 60)}=..." for k in names[:20]) + ("&..." if len(names) > 20 else "")


def error(message: str, code: str, type: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": type, "param": None, "code": code}}).encode()


# (path, status, message, code) -> the refusal's body, in the shape of the protocol on that path
ErrorShape = Callable[[str, int, str, str], bytes]


def openai_shape(path: str, status: int, message: str, code: str) -> bytes:
    return error(message, code)


class SecurityMiddleware:
    """Checks each HTTP request against a `SecurityPolicy` before the app sees it."""

    def __init__(self, app: ASGIApp, policy: SecurityPolicy, error_shape: ErrorShape = openai_shape,
                 on_refusal: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.policy = policy
        self.error_shape = error_shape
        self.on_refusal = on_refusal  # told each refusal's error code (the metrics)
        for key in policy.api_keys:
            problem = key_problem(key)
            if problem:
                raise ValueError(problem)
        # Keys are compared as digests: the comparison takes the same time whatever the key's
        # length or the number of matching leading characters.
        self._keys = tuple(hashlib.sha256(k.encode()).digest() for k in policy.api_keys)
        hosts = policy.allowed_hosts
        self._hosts = None if hosts is None or "*" in hosts else frozenset(h.lower() for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req-{uuid.uuid4().hex[:20]}"
        scope[REQUEST_ID_KEY] = request_id
        rid = (b"x-request-id", request_id.encode())
        status = [0]
        started = time.monotonic()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), rid]}
            await send(message)

        try:
            await self._checked(scope, receive, send_with_id, request_id)
        finally:
            # the access log: the path escaped, the query string's names only (uvicorn's own
            # access log, which prints values, is off in `chatsieve serve`)
            client = (scope.get("client") or ("-", 0))[0]
            line = f'{log_safe(scope["method"], 20)} {log_safe(scope["path"])}'
            line += redacted_query(scope.get("query_string", b""))
            caller = scope.get(CALLER_KEY)
            access_log.info('%s %s "%s HTTP/%s" %d %.0fms %s', request_id, client, line,
                            log_safe(scope.get("http_version", ""), 8), status[0], (time.monotonic() - started) * 1000,
                            caller.label if isinstance(caller, Caller) else "-")

    async def _checked(self, scope: Scope, receive: Receive, send_with_id: Send, request_id: str) -> None:
        headers = _headers(scope)
        refusal = self._refuse(scope, headers)
        if refusal is not None:
            status, message, code, extra = refusal
            log.info("%s %s %s refused: %d %s", request_id, log_safe(scope["method"], 20), log_safe(scope["path"]),
                     status, code)
            self._refused(code)
            await _respond(send_with_id, status, self.error_shape(scope["path"], status, message, code), extra)
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                async with asyncio.timeout(self.policy.body_timeout):  # (a third of anyio.fail_after's cost)
                    body = await _read_body(receive, self.policy.max_body_bytes)
            except _TooLarge:
                self._refused("request_too_large")
                log.info("%s request body over %d bytes: 413", request_id, self.policy.max_body_bytes)
                await _respond(send_with_id, 413, self.error_shape(
                    scope["path"], 413, f"the request body is larger than {self.policy.max_body_bytes} bytes",
                    "request_too_large"), [(b"connection", b"close")])
                return
            except TimeoutError:
                self._refused("request_timeout")
                log.info("%s request body not received within %gs: 408", request_id, self.policy.body_timeout)
                await _respond(send_with_id, 408, self.error_shape(
                    scope["path"], 408, f"the request body did not arrive within {self.policy.body_timeout:g} seconds",
                    "request_timeout"), [(b"connection", b"close")])
                return
            if body is None:
                return  # the client went away
            receive = _replay(body, receive)
        await self.app(scope, receive, send_with_id)

    def _refused(self, code: str) -> None:
        if self.on_refusal is not None:
            self.on_refusal(code)

    def _refuse(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str, str, list] | None:
        """(status, message, code, extra headers) of a refusal, or None."""
        if self._hosts is not None:
            host = _hostname(headers.get(b"host", b"").decode("latin-1"))
            if host not in self._hosts:
                return 400, f"the Host {host!r} is not one this server answers to (--allowed-hosts)", \
                    "host_not_allowed", []
        caller = identify(headers.get(b"authorization"), headers.get(b"x-api-key"), self._keys)
        if isinstance(caller, Caller):
            scope[CALLER_KEY] = caller
        elif scope["path"] not in self.policy.open_paths:
            return 401, caller, "invalid_api_key", [(b"www-authenticate", b"Bearer")]
        if scope["method"] in ("POST", "PUT", "PATCH"):
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if kind != b"application/json":
                return 415, "the request body must be JSON, sent with 'Content-Type: application/json'", \
                    "unsupported_media_type", []
            length = headers.get(b"content-length")
            if length is not None and length.strip().isdigit() and int(length) > self.policy.max_body_bytes:
                return 413, f"the request body is larger than {self.policy.max_body_bytes} bytes", \
                    "request_too_large", [(b"connection", b"close")]
        return None


class _TooLarge(Exception):
    pass


def _headers(scope: Scope) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for k, v in scope.get("headers", ()):
        out.setdefault(k.lower(), v)  # the first of repeated headers
    return out


def _hostname(host: str) -> str:
    """The name in a Host header, lower case, without port or trailing dot; a malformed header
    (`[::1]evil.example`) gives itself whole, which no allow-list holds."""
    host = host.strip().lower()
    if not valid_host(host):
        return host
    if host.startswith("["):  # [::1]:8000
        return host[1 : host.find("]")]
    return host.partition(":")[0].rstrip(".")


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then the real channel: a disconnect still reaches the app

    return replay


async def _respond(send: Send, status: int, body: bytes, extra: Iterable[tuple[bytes, bytes]]) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# ---------------------------------------------------------------- slow clients


def guarded_h11(header_timeout: float, max_connections: int) -> type:
    """uvicorn's h11 protocol, bounded against slow or idle clients (slowloris):

    - a connection beyond `max_connections` open ones is closed at once, unread, so half-open
      connections cannot use up the process's file descriptors;
    - a request's headers must arrive within `header_timeout` seconds of its first byte (of the
      connection, for the first request), or the connection is closed.
    Each request is offered a `chunked_body.ChunkedBody` (streamed bodies written past h11).
    Idle keep-alive connections are closed by uvicorn's own timeout_keep_alive.

    The class is named after its bounds and importable from this module (see `__getattr__`),
    so uvicorn can hand it to `--workers` processes, which pickle their configuration.
    """
    name = _guard_name(header_timeout, max_connections)
    return globals().get(name) or __getattr__(name)


_GUARD_PREFIX = "GuardedH11Protocol_"


def _guard_name(header_timeout: float, max_connections: int) -> str:
    return f"{_GUARD_PREFIX}{round(header_timeout * 1000)}ms_{max_connections}"


def __getattr__(name: str) -> type:
    """`GuardedH11Protocol_<ms>ms_<n>`: the bounded protocol class, made on first use."""
    if not name.startswith(_GUARD_PREFIX):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        ms, n = name[len(_GUARD_PREFIX) :].split("ms_")
        cls = _make_guarded_h11(int(ms) / 1000, int(n))
    except ValueError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    cls.__name__ = cls.__qualname__ = name
    globals()[name] = cls
    return cls


# ---------------------------------------------------------------- strict request framing

_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^\x00-\x20\x7f]+ HTTP/1\.[01]")
# percent-escapes that change a path's meaning once decoded: "/", "\\", NUL
_ENCODED_SEPARATORS = re.compile(rb"%(2f|5c|00)", re.IGNORECASE)


def request_head_problem(head: bytes, max_bytes: int) -> str | None:
    """Why a complete request head (request line and header lines, up to and including the empty
    line) must be refused, or None. Stricter than h11, which recovers from what a proxy in front
    may read differently (RFC 9112): line ends other than CRLF, obs-fold continuation lines, any
    version but HTTP/1.0 and 1.1, Content-Length beside Transfer-Encoding (§6.1, a smuggling
    precondition), an encoded "/" or "\\" in the path, a Host that is not host[:port]."""
    if len(head) > max_bytes:
        return f"request head over {max_bytes} bytes"
    head = head.lstrip(b"\r\n")  # empty lines before the request line may be ignored (§2.2)
    if head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\r\n"):
        return "a line of the request head does not end with CRLF"
    lines = head.split(b"\r\n")
    if not _REQUEST_LINE.fullmatch(lines[0]):
        return "malformed request line, or an HTTP version other than 1.0 and 1.1"
    path = lines[0].split(b" ")[1].split(b"?", 1)[0]
    if _ENCODED_SEPARATORS.search(path):
        return "an encoded '/', '\\' or NUL in the path"
    names: list[bytes] = []
    hosts: list[bytes] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):
            return "a folded header line (obs-fold)"
        name, _, value = line.partition(b":")
        names.append(name.strip().lower())
        if names[-1] == b"host":
            hosts.append(value.strip())
    if b"transfer-encoding" in names and b"content-length" in names:
        return "both Content-Length and Transfer-Encoding"
    for host in hosts:
        if not valid_host(host.decode("latin-1")):
            return "a Host header that is not host[:port]"
    return None


_REG_NAME = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=%]*")
_LEADING_BLANK_LINES = re.compile(rb"[\r\n]*")


def valid_host(host: str) -> bool:
    """Whether `host` is a Host header value: a name, an IPv4 address or a bracketed IPv6 address,
    with an optional port (RFC 9110 §7.2, RFC 3986 §3.2.2)."""
    name, port = host, ""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return False
        name, rest = host[1:end], host[end + 1:]
        if rest and not rest.startswith(":"):
            return False
        port = rest[1:]
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return False
    elif ":" in host:
        name, _, port = host.partition(":")
        if not _REG_NAME.fullmatch(name):
            return False
    elif not _REG_NAME.fullmatch(name):
        return False
    return port == "" or (port.isascii() and port.isdigit())


def _strict_connection(max_head: int) -> Any:
    """An h11 server connection whose reader checks each request head with `request_head_problem`
    before h11 parses it (every head, pipelined ones included); a refusal is h11's protocol error,
    which uvicorn answers with a 400 and closes the connection."""
    return _strict_connection_class()(max_head)


@functools.cache
def _strict_connection_class() -> type:
    """`_strict_connection`'s class, made once (h11 is imported where a server runs)."""
    import h11
    from h11._readers import maybe_read_from_IDLE_client

    class StrictConnection(h11.Connection):
        def __init__(self, max_head: int) -> None:
            # (the reader is not a bound method: that would make every connection a cycle, left
            # for the cyclic collector instead of freed when its protocol lets go of it)
            self._read_head = _head_reader(max_head)
            super().__init__(h11.SERVER, max_incomplete_event_size=max_head)

        def _get_io_object(self, role: Any, event: Any, io_dict: Any) -> Any:
            reader = super()._get_io_object(role, event, io_dict)
            return self._read_head if reader is maybe_read_from_IDLE_client else reader

    return StrictConnection


@functools.cache
def _head_reader(max_head: int) -> Callable[[Any], Any]:
    """The reader `_strict_connection` puts before h11's own for a new request's head."""
    import h11
    from h11._readers import maybe_read_from_IDLE_client

    def read_head(buf: Any) -> Any:
        raw = bytes(buf)
        start = _LEADING_BLANK_LINES.match(raw).end()  # (not the head's end; counted without copying the body)
        # The head ends at its first empty line, not searched for in the body that came with it:
        # only the first max_head + 3 bytes (a head that ends later is over max_head bytes,
        # refused below as it would be if its end had been found), and for a bare-LF end only up
        # to the first CRLF one (the first end is the one that counts).
        limit = max_head + 3
        crlf = raw.find(b"\n\r\n", start, limit)
        lf = raw.find(b"\n\n", start, limit if crlf < 0 else crlf + 1)
        if crlf >= 0 or lf >= 0:
            end = crlf if lf < 0 else lf
            head = raw[: end + (3 if raw[end:end + 3] == b"\n\r\n" else 2)]
            problem = request_head_problem(head, max_head)
            if problem is not None:
                log.info("refused a request: %s (400, connection closed)", problem)
                raise h11.LocalProtocolError(problem)
        elif len(raw) > max_head:
            raise h11.LocalProtocolError(f"request head over {max_head} bytes")
        return maybe_read_from_IDLE_client(buf)

    return read_head


def _make_guarded_h11(header_timeout: float, max_connections: int) -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, H11Protocol

    from chatsieve.server.chunked_body import offer as offer_chunked_body

    class GuardedH11Protocol(H11Protocol):
        _header_timer: Any = None

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            limit = config.h11_max_incomplete_event_size
            self.conn = _strict_connection(DEFAULT_MAX_INCOMPLETE_EVENT_SIZE if limit is None else limit)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                log.warning("%d connections open: closing a new one (--limit-concurrency)", len(self.connections))
                transport.abort()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request on a kept-alive connection has begun
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # its headers are complete

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            offer_chunked_body(self)  # a new request: its body may be written past h11

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
