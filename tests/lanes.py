"""The compiled text lane (`chatsieve._lane`, built by the dev install where a C compiler is found)
in tests: its type, or skip (fail under CI); the engine connection built on it; a transport for
such a connection; and a stand-in for `backends.compiled_lane` that counts the reads the lane takes
itself (those it does not hand to the Python callback)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from models import DEV_INSTALL, require_module


def compiled_lane() -> type:
    return require_module("chatsieve._lane", DEV_INSTALL).Lane


class Transport:
    """An engine connection's transport in a test: keeps what is written."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def compiled_connection() -> type:
    """The engine connection whose reads `chatsieve._lane.ConnectionBase` takes first."""
    lane = require_module("chatsieve._lane", DEV_INSTALL)
    from chatsieve.server import client

    if not hasattr(lane, "ConnectionBase"):
        pytest.fail("chatsieve._lane was built from an older source (no ConnectionBase): rebuild it "
                    "(python setup.py build_ext --inplace)")
    if client._Connection is client._PlainConnection:
        pytest.skip("CHATSIEVE_COMPILED_LANE=0: the engine connection is the plain one")
    return client._Connection


def counting_lane(lane_type: type, took: list[bytes]) -> Callable[..., Callable[[bytes], bool]]:
    """`backends.compiled_lane` as `lane_type`, appending each read its lane takes to `took`."""

    def make(fallback: Callable[[bytes], bool], *args, **kwargs) -> Callable[[bytes], bool]:
        passed = [False]

        def counted(raw: bytes) -> bool:
            passed[0] = True
            return fallback(raw)

        lane = lane_type(counted, *args, **kwargs)

        def call(raw: bytes) -> bool:
            passed[0] = False
            out = lane(raw)
            if not passed[0]:
                took.append(raw)
            return out

        return call

    return make
