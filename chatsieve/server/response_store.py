"""The Responses API's stored responses: an embedded SQLite database, each turn stored once.

A row holds one response and the input items of its own request; a response that continued
another (previous_response_id) refers to that row instead of copying the conversation, so the
file grows with what was sent, not with the square of a conversation's length. Each row carries
its conversation's size up to itself (`chain_items`, `chain_bytes`), so a continuation can be
refused before anything is loaded.

Who sees a row: only its owner, a hash of the API key that created it (never the key). Bounds:
rows (`max_responses`), bytes (`max_bytes`, the rows' JSON) and age (`max_age` since the row or a
response continuing it was stored); past them the least recently continued rows go first, a
response always after every response continuing it, so no kept response loses the items it
was made from. A deleted response disappears at once; its items stay (unseen) while a kept
response continues from it. Space is given back (incremental vacuum, a small WAL). The files are
the owner's only (directory 0700, database, WAL and shared memory 0600); a store whose files
others could read is refused. WAL and a busy timeout keep it safe under ``--workers N``.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chatsieve._json import dumps, loads
from chatsieve.server.security import key_id

MEMORY = ":memory:"
DEFAULT_MAX_RESPONSES = 10_000
DEFAULT_MAX_AGE = 30 * 24 * 3600.0  # seconds
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB of stored JSON
BUSY_TIMEOUT_MS = 10_000
WAL_CHECKPOINT_PAGES = 128  # a checkpoint once the WAL holds 512 KiB (4 KiB pages)
WAL_KEEP_BYTES = 1 << 20  # a WAL larger than this after a write is checkpointed and truncated
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    previous TEXT,               -- the response this one continued, or NULL
    depth INTEGER NOT NULL,      -- 0 for a response without previous_response_id
    created REAL NOT NULL,
    used REAL NOT NULL,          -- when it, or a response continuing it, was stored
    visible INTEGER NOT NULL,    -- 0: deleted, kept while a response continues from it
    items INTEGER NOT NULL,      -- its input and output items (at least 1)
    bytes INTEGER NOT NULL,      -- its input's and response's JSON
    chain_items INTEGER NOT NULL,  -- the conversation up to and including it
    chain_bytes INTEGER NOT NULL,
    input BLOB NOT NULL,         -- its own request's input items (JSON)
    response BLOB NOT NULL       -- the response object (JSON)
);
CREATE INDEX IF NOT EXISTS responses_used ON responses (used, depth);
CREATE INDEX IF NOT EXISTS responses_previous ON responses (previous);
CREATE TABLE IF NOT EXISTS totals (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES ('bytes', 0);
CREATE TRIGGER IF NOT EXISTS responses_added AFTER INSERT ON responses BEGIN
    UPDATE totals SET value = value + NEW.bytes WHERE name = 'bytes';
END;
CREATE TRIGGER IF NOT EXISTS responses_removed AFTER DELETE ON responses BEGIN
    UPDATE totals SET value = value - OLD.bytes WHERE name = 'bytes';
END;
"""

# a version 1 store (every row copied its whole context): its rows become first turns
_FROM_V1 = """
ALTER TABLE responses RENAME TO responses_v1;
DROP INDEX IF EXISTS responses_created;
{schema}
INSERT INTO responses (id, owner, previous, depth, created, used, visible, items, bytes, chain_items,
                       chain_bytes, input, response)
SELECT id, owner, NULL, 0, created, created, 1, n, b, n, b, CAST(context AS BLOB), CAST(response AS BLOB)
FROM (SELECT *, max(1, json_array_length(context) + coalesce(json_array_length(response, '$.output'), 0)) AS n,
             length(CAST(context AS BLOB)) + length(CAST(response AS BLOB)) AS b FROM responses_v1);
DROP TABLE responses_v1;
"""

# the row and every row it continues, newest first
_CHAIN = """
WITH RECURSIVE chain(id, n) AS (
    SELECT ?, 0
    UNION ALL
    SELECT r.previous, chain.n + 1 FROM responses r JOIN chain ON r.id = chain.id WHERE r.previous IS NOT NULL
)
"""


def default_store_path() -> Path:
    """``$XDG_CACHE_HOME/chatsieve/responses.sqlite3`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chatsieve" / "responses.sqlite3"


def owner_of(api_key: str | None) -> str:
    """What a row is bound to: the caller's id (`security.key_id`; "" for no key)."""
    return key_id(api_key)


@dataclass(frozen=True)
class StoredResponse:
    response: dict  # the response object as returned
    context: list[dict]  # the items it was generated from: earlier turns, then its own input

    @property
    def conversation(self) -> list[dict]:
        """What a response continuing this one starts from: its context, then its output."""
        return [*self.context, *self.response.get("output", [])]


@dataclass(frozen=True)
class ChainSize:
    """A stored conversation's size up to and including one response: items and JSON bytes."""

    items: int
    bytes: int


def _private(path: Path) -> None:
    """Create the store's directory (0700) and database file (0600), whose mode SQLite gives the
    WAL and shared-memory files too; refuse existing files that other accounts could read."""
    directory = path.parent
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
        directory.chmod(0o700)  # whatever the umask
    for file in (path, *(Path(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal"))):
        try:
            st = file.lstat()
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise ValueError(f"{file} is not a file of this account: remove it, or choose another --response-store")
        if mode & 0o077:
            raise ValueError(
                f"{file} can be read or written by other accounts (mode {mode:04o}), and it holds request "
                f"text: run chmod 600 {file} (and chmod 700 {directory}), or choose another --response-store"
            )
    if not path.exists():
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:  # another worker made it
            pass
        else:
            path.chmod(0o600)


class ResponseStore:
    """Stored responses by id, per owner, each turn once; bounded by count, bytes and age."""

    def __init__(
        self,
        path: str | Path = MEMORY,
        *,
        max_responses: int = DEFAULT_MAX_RESPONSES,
        max_age: float = DEFAULT_MAX_AGE,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if max_responses < 1 or max_age <= 0 or max_bytes < 1:
            raise ValueError("the response store needs max_responses >= 1, max_bytes >= 1 and max_age > 0")
        self.path = str(path)
        self.max_responses = max_responses
        self.max_age = max_age
        self.max_bytes = max_bytes
        if self.path != MEMORY:
            _private(Path(self.path))
        self._lock = threading.Lock()  # one connection, used from the server's worker threads
        self._db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
        )
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect in a new file
            if self.path != MEMORY:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
                self._db.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
                self._db.execute(f"PRAGMA journal_size_limit = {WAL_KEEP_BYTES}")
            self._create()
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise ValueError(f"cannot open the response store {self.path}: {e} (--response-store)") from None

    def _create(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
            migrated = "context" in columns
            if migrated:
                for statement in _statements(_FROM_V1.format(schema=_SCHEMA)):
                    db.execute(statement)
                db.execute("UPDATE totals SET value = (SELECT coalesce(sum(bytes), 0) FROM responses)")
            else:
                for statement in _statements(_SCHEMA):
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if migrated and db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("VACUUM")  # the old file's copies go, and incremental vacuum works from now on

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------ writing

    def put(self, owner: str, response: dict, input: Sequence[dict], previous: str | None = None) -> bool:
        """Store `response` (by its id) for `owner`, with its own request's `input` items, as
        continuing `previous` (a response of the same owner); then evict what the bounds no longer
        allow. False when it cannot be stored: `previous` is gone, or it alone is over max_bytes."""
        response_json = dumps(response)
        input_json = dumps(list(input))
        size = len(response_json) + len(input_json)
        items = max(1, len(input) + len(response.get("output") or ()))
        if size > self.max_bytes:
            return False
        now = time.time()
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                depth, chain_items, chain_bytes = 0, items, size
                if previous is not None:
                    row = db.execute(
                        "SELECT depth, chain_items, chain_bytes FROM responses WHERE id = ? AND owner = ?",
                        (previous, owner),
                    ).fetchone()
                    if row is None:
                        db.execute("ROLLBACK")
                        return False
                    depth, chain_items, chain_bytes = row[0] + 1, row[1] + items, row[2] + size
                    # the conversation it continues is as recently used as it is (eviction order)
                    db.execute(_CHAIN + "UPDATE responses SET used = ? WHERE id IN (SELECT id FROM chain)",
                               (previous, now))
                db.execute(
                    "INSERT INTO responses (id, owner, previous, depth, created, used, visible, items, bytes, "
                    "chain_items, chain_bytes, input, response) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)",
                    (response["id"], owner, previous, depth, now, now, items, size, chain_items, chain_bytes,
                     input_json, response_json),
                )
                removed = self._evict(now)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if removed:
                self._give_back()
            self._trim_wal()
        return True

    def delete(self, owner: str, response_id: str) -> bool:
        """Whether a visible response of `owner` with this id was there (and is now gone)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                found = db.execute(
                    "UPDATE responses SET visible = 0 WHERE id = ? AND owner = ? AND visible = 1",
                    (response_id, owner),
                ).rowcount > 0
                if found:
                    self._collect(response_id)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if found:
                self._give_back()
        return found

    def _evict(self, now: float) -> bool:
        """Remove rows past the age, count and byte bounds, least recently used first (a row
        after the rows continuing it: they are at most as recently used, and deeper)."""
        db = self._db
        removed = False
        expired = [r[0] for r in db.execute("SELECT id FROM responses WHERE used < ? ORDER BY used, depth DESC",
                                            (now - self.max_age,))]
        for id in expired:
            self._remove(id)
            removed = True
        while True:
            count = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            total = db.execute("SELECT value FROM totals WHERE name = 'bytes'").fetchone()[0]
            if count <= self.max_responses and total <= self.max_bytes:
                return removed
            batch = max(1, min(count - self.max_responses, 256))
            for (id,) in db.execute("SELECT id FROM responses ORDER BY used, depth DESC LIMIT ?",
                                    (batch,)).fetchall():
                self._remove(id)
                removed = True

    def _remove(self, id: str | None) -> None:
        """Delete row `id`, then its predecessors that were deleted by their owner and that no
        other row continues any more."""
        db = self._db
        while id is not None:
            row = db.execute("SELECT previous FROM responses WHERE id = ?", (id,)).fetchone()
            if row is None:
                return
            db.execute("DELETE FROM responses WHERE id = ?", (id,))
            id = row[0]
            if id is None or db.execute(
                "SELECT 1 FROM responses WHERE id = ? AND visible = 0 "
                "AND NOT EXISTS (SELECT 1 FROM responses c WHERE c.previous = ?)", (id, id)
            ).fetchone() is None:
                return

    def _collect(self, id: str) -> None:
        """A row just hidden: gone at once (with hidden predecessors) unless a row continues it."""
        if self._db.execute("SELECT 1 FROM responses WHERE previous = ? LIMIT 1", (id,)).fetchone() is None:
            self._remove(id)

    def _give_back(self) -> None:
        """Return the pages deleted rows left to the file system (incremental vacuum)."""
        self._db.executescript("PRAGMA incremental_vacuum;")  # (execute would free one page)
        self._trim_wal()

    def _trim_wal(self) -> None:
        """After a large write, copy the WAL into the database and cut it to nothing: it would
        otherwise keep the size (and the text) of the largest response until it is reused."""
        if self.path == MEMORY:
            return
        try:
            size = os.path.getsize(self.path + "-wal")
        except OSError:
            return
        if size > WAL_KEEP_BYTES:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # ------------------------------------------------------------ reading

    def _visible(self) -> str:
        return "owner = ? AND visible = 1 AND used >= ?"

    def response(self, owner: str, response_id: str) -> dict | None:
        """The stored response object, or None if unknown, expired, deleted or another owner's."""
        with self._lock:
            row = self._db.execute(
                f"SELECT response FROM responses WHERE id = ? AND {self._visible()}",
                (response_id, owner, time.time() - self.max_age),
            ).fetchone()
        return None if row is None else loads(row[0])

    def size(self, owner: str, response_id: str) -> ChainSize | None:
        """The size of the conversation up to and including a visible response (None as in
        `response`), read without loading it."""
        with self._lock:
            row = self._db.execute(
                f"SELECT chain_items, chain_bytes FROM responses WHERE id = ? AND {self._visible()}",
                (response_id, owner, time.time() - self.max_age),
            ).fetchone()
        return None if row is None else ChainSize(row[0], row[1])

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The stored response and the items it was made from (None as in `response`)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN")  # one snapshot for the check and the chain
            try:
                found = db.execute(
                    f"SELECT 1 FROM responses WHERE id = ? AND {self._visible()}",
                    (response_id, owner, time.time() - self.max_age),
                ).fetchone()
                rows = [] if found is None else db.execute(
                    _CHAIN + "SELECT r.input, r.response FROM chain JOIN responses r ON r.id = chain.id "
                    "WHERE r.owner = ? ORDER BY chain.n DESC", (response_id, owner)).fetchall()
            finally:
                db.execute("COMMIT")
        if not rows:
            return None
        context: list[dict] = []
        for input_json, response_json in rows[:-1]:
            context += loads(input_json)
            context += loads(response_json).get("output") or []
        input_json, response_json = rows[-1]
        context += loads(input_json)
        return StoredResponse(loads(response_json), context)

    def count(self) -> int:
        """Rows stored (deleted ones kept for a continuation included)."""
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def stored_bytes(self) -> int:
        """The rows' JSON bytes, what `max_bytes` bounds."""
        with self._lock:
            return self._db.execute("SELECT value FROM totals WHERE name = 'bytes'").fetchone()[0]


def _statements(script: str) -> list[str]:
    """`script`'s statements (sqlite3.complete_statement decides where each ends), to run inside
    a transaction of ours, which executescript would commit."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return [s for s in out if s]
