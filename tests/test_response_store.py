"""The Responses store on its own: owners, bounds, restart, and concurrent writers (the way
`--workers 2` writes: two processes, one database file)."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from chatsieve.server import response_store
from chatsieve.server.response_store import ResponseStore, owner_of


def _response(i: int | str) -> dict:
    return {"id": f"resp_{i}", "object": "response", "output": [{"type": "message", "id": f"msg_{i}"}]}


def test_owner_is_a_hash_never_the_key():
    assert owner_of(None) == owner_of("") == ""
    a, b = owner_of("sk-alpha"), owner_of("sk-beta")
    assert a != b and len(a) == 64 and "sk-alpha" not in a


def test_a_key_sees_only_its_own_rows(tmp_path):
    store = ResponseStore(tmp_path / "r.db")
    alice, bob = owner_of("sk-alice"), owner_of("sk-bob")
    store.put(alice, _response(1), [{"type": "message", "id": "in_1"}])
    got = store.get(alice, "resp_1")
    assert got is not None and got.response["id"] == "resp_1"
    assert [i["id"] for i in got.conversation] == ["in_1", "msg_1"]
    assert store.get(bob, "resp_1") is None
    assert store.delete(bob, "resp_1") is False
    assert store.get(alice, "resp_1") is not None  # bob's delete did nothing
    assert store.delete(alice, "resp_1") is True and store.get(alice, "resp_1") is None
    # the key itself is nowhere in the file
    store.close()
    assert b"sk-alice" not in (tmp_path / "r.db").read_bytes()


def test_restart_keeps_rows(tmp_path):
    path = tmp_path / "sub" / "r.db"  # the directory is made
    first = ResponseStore(path)
    first.put("o", _response("kept"), [])
    first.close()
    again = ResponseStore(path)
    assert again.get("o", "resp_kept").response == _response("kept")


def test_count_bound_evicts_the_oldest():
    store = ResponseStore(":memory:", max_responses=3)
    for i in range(5):
        store.put("o", _response(i), [])
    assert store.count() == 3
    assert [store.get("o", f"resp_{i}") is not None for i in range(5)] == [False, False, True, True, True]


def test_age_bound_evicts_and_hides_old_rows(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(response_store.time, "time", lambda: clock[0])
    store = ResponseStore(":memory:", max_age=60)
    store.put("o", _response("old"), [])
    clock[0] += 61
    assert store.get("o", "resp_old") is None  # expired: not found even before eviction
    store.put("o", _response("new"), [])
    assert store.count() == 1 and store.get("o", "resp_new") is not None


def test_bad_bounds_and_bad_files_say_so(tmp_path):
    with pytest.raises(ValueError, match="max_responses"):
        ResponseStore(":memory:", max_responses=0)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="--response-store"):
        ResponseStore(junk)


def _writer(path: str, tag: str, n: int) -> None:
    store = ResponseStore(path, max_responses=10_000)
    for i in range(n):
        store.put(owner_of(tag), _response(f"{tag}_{i}"), [{"type": "message", "id": f"{tag}_{i}"}])
        assert store.get(owner_of(tag), f"resp_{tag}_{i}") is not None
    store.close()


def test_two_processes_write_one_file(tmp_path):
    path = str(tmp_path / "shared.db")
    ResponseStore(path).close()  # the schema and WAL mode exist before both start
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, tag, 150)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone() == (300,)
    store = ResponseStore(path)
    assert all(store.get(owner_of(t), f"resp_{t}_{i}") for t in "ab" for i in range(150))


# ---------------------------------------------------------------- issue 33: turns, bytes, space


def _turn(i: int | str, text: str = "") -> tuple[dict, list[dict]]:
    """A response and its own input (one message of `text`)."""
    return _response(i), [{"type": "message", "id": f"in_{i}", "role": "user", "content": text}]


def test_a_continuation_refers_to_the_turns_before_it(tmp_path):
    store = ResponseStore(tmp_path / "r.db")
    previous = None
    for i in range(4):
        response, input = _turn(i, "x" * 10_000)
        assert store.put("o", response, input, previous)
        previous = response["id"]
    got = store.get("o", "resp_3")
    assert [i["id"] for i in got.context] == ["in_0", "msg_0", "in_1", "msg_1", "in_2", "msg_2", "in_3"]
    assert store.size("o", "resp_3").items == 8 and store.size("o", "resp_1").items == 4
    # each row holds its own turn: the stored bytes grow with the turns, not with their square
    assert store.stored_bytes() < 4 * 10_300
    assert store.get("other", "resp_3") is None and store.size("other", "resp_3") is None
    assert not store.put("other", *_turn("x"), previous="resp_3")  # another owner's chain: not stored


def test_a_deleted_turn_stays_for_the_responses_continuing_it(tmp_path):
    store = ResponseStore(tmp_path / "r.db")
    store.put("o", *_turn(1))
    store.put("o", *_turn(2), previous="resp_1")
    assert store.delete("o", "resp_1") and store.get("o", "resp_1") is None
    assert store.delete("o", "resp_1") is False
    assert [i["id"] for i in store.get("o", "resp_2").context] == ["in_1", "msg_1", "in_2"]
    assert store.count() == 2  # resp_1's items are kept, unseen
    assert store.delete("o", "resp_2")
    assert store.count() == 0  # nothing continues resp_1 any more: both gone


def test_the_byte_bound_evicts_whole_conversations_least_recently_continued_first(tmp_path):
    store = ResponseStore(tmp_path / "r.db", max_bytes=50_000)
    store.put("o", *_turn("a1", "x" * 10_000))
    store.put("o", *_turn("b1", "x" * 10_000))
    store.put("o", *_turn("a2", "x" * 10_000), previous="resp_a1")  # a was continued after b began
    store.put("o", *_turn("c1", "x" * 10_000))
    store.put("o", *_turn("c2", "x" * 10_000), previous="resp_c1")
    assert store.stored_bytes() <= 50_000
    kept = {i for i in ("a1", "a2", "b1", "c1", "c2") if store.get("o", f"resp_{i}") is not None}
    assert kept == {"a1", "a2", "c1", "c2"}, kept  # b went first
    # a kept response always has every turn it continues
    assert [i["id"] for i in store.get("o", "resp_a2").context] == ["in_a1", "msg_a1", "in_a2"]
    assert not ResponseStore(":memory:", max_bytes=1000).put("o", *_turn("big", "x" * 2000))


def test_deleted_rows_give_their_space_back(tmp_path):
    path = tmp_path / "r.db"
    store = ResponseStore(path)
    for i in range(20):
        store.put("o", *_turn(i, "x" * 200_000))
    full = path.stat().st_size
    for i in range(20):
        store.delete("o", f"resp_{i}")
    store.close()
    assert path.stat().st_size < full / 10, (path.stat().st_size, full)


def test_a_version_1_store_is_migrated(tmp_path):
    import json

    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE responses (id TEXT PRIMARY KEY, owner TEXT NOT NULL, created REAL NOT NULL,
                                response TEXT NOT NULL, context TEXT NOT NULL);
        CREATE INDEX responses_created ON responses (created);
    """)
    import time

    db.execute("INSERT INTO responses VALUES (?, ?, ?, ?, ?)",
               ("resp_old", owner_of("k"), time.time(), json.dumps(_response("old")),
                json.dumps([{"type": "message", "id": "in_a"}, {"type": "message", "id": "in_b"}])))
    db.commit()
    db.close()
    path.chmod(0o600)
    store = ResponseStore(path)
    got = store.get(owner_of("k"), "resp_old")
    assert got.response == _response("old") and [i["id"] for i in got.context] == ["in_a", "in_b"]
    assert store.size(owner_of("k"), "resp_old").items == 3
    store.put(owner_of("k"), *_turn("new"), previous="resp_old")
    assert [i["id"] for i in store.get(owner_of("k"), "resp_new").context] == ["in_a", "in_b", "msg_old", "in_new"]
