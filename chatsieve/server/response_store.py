"""The Responses API's stored responses: an embedded SQLite database, bounded by count and age.

Each row is bound to a hash of the API key that created it (never the key): a lookup with
another key finds nothing. WAL and a busy timeout keep it safe under ``--workers N``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

MEMORY = ":memory:"
DEFAULT_MAX_RESPONSES = 10_000
DEFAULT_MAX_AGE = 30 * 24 * 3600.0  # seconds
BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created REAL NOT NULL,
    response TEXT NOT NULL,
    context TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
"""


def default_store_path() -> Path:
    """``$XDG_CACHE_HOME/chatsieve/responses.sqlite3`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chatsieve" / "responses.sqlite3"


def owner_of(api_key: str | None) -> str:
    """What a row is bound to: a SHA-256 of the API key the request carried ("" for none)."""
    if not api_key:
        return ""
    return hashlib.sha256(
        b"chatsieve-response-store\x00" + api_key.encode("utf-8", "surrogatepass")
    ).hexdigest()


@dataclass(frozen=True)
class StoredResponse:
    response: dict  # the response object as returned
    context: list[dict]  # the items the response was generated from (history + its input)

    @property
    def conversation(self) -> list[dict]:
        """What a response continuing this one starts from: its context, then its output."""
        return [*self.context, *self.response.get("output", [])]


class ResponseStore:
    """Stored responses by id, per owner; the oldest go first beyond `max_responses` or `max_age`."""

    def __init__(
        self,
        path: str | Path = MEMORY,
        *,
        max_responses: int = DEFAULT_MAX_RESPONSES,
        max_age: float = DEFAULT_MAX_AGE,
    ) -> None:
        if max_responses < 1 or max_age <= 0:
            raise ValueError("the response store needs max_responses >= 1 and max_age > 0")
        self.path = str(path)
        self.max_responses = max_responses
        self.max_age = max_age
        if self.path != MEMORY:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # one connection, used from the server's worker threads
        self._db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
        )
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if self.path != MEMORY:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise ValueError(f"cannot open the response store {self.path}: {e} (--response-store)") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def put(self, owner: str, response: dict, context: list[dict]) -> None:
        """Store `response` (by its id) for `owner`, then evict what the bounds no longer allow."""
        now = time.time()
        row = (response["id"], owner, now, json.dumps(response), json.dumps(context))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", row)
                self._db.execute("DELETE FROM responses WHERE created < ?", (now - self.max_age,))
                self._db.execute(
                    "DELETE FROM responses WHERE id IN "
                    "(SELECT id FROM responses ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?)",
                    (self.max_responses,),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The stored response, or None if unknown, expired or another owner's."""
        with self._lock:
            row = self._db.execute(
                "SELECT response, context FROM responses WHERE id = ? AND owner = ? AND created >= ?",
                (response_id, owner, time.time() - self.max_age),
            ).fetchone()
        if row is None:
            return None
        return StoredResponse(json.loads(row[0]), json.loads(row[1]))

    def delete(self, owner: str, response_id: str) -> bool:
        """Whether a response of `owner` with this id was there (and is now gone)."""
        with self._lock:
            cur = self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        return cur.rowcount > 0

    def count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
