"""Unique argument keys (chatsieve.args.keys): on random JSON with repeated keys at any
depth, released whole the last value wins, streamed in any chunks the first does; the
result is valid JSON without a repeated key, and every removed member is reported."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from chatsieve.args.keys import FirstKeyWins, last_key_wins

KEYS = st.sampled_from(["a", "b", "c", 'q"', "\\", "é", ":", ","])
SCALARS = st.one_of(
    st.integers(-5, 5), st.booleans(), st.none(), st.text(alphabet='ab,:{}[]"\\ ', max_size=6)
)


class Obj(list):
    """An object as its members in order: keys may repeat."""


JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(st.tuples(KEYS, inner), max_size=5).map(Obj),
    ),
    max_leaves=20,
)


def dump(v) -> str:
    """Compact JSON, keeping an Obj's repeated keys."""
    if isinstance(v, Obj):
        return "{" + ",".join(json.dumps(k) + ":" + dump(x) for k, x in v) + "}"
    if isinstance(v, list):
        return "[" + ",".join(map(dump, v)) + "]"
    return json.dumps(v)


def resolve(v, *, last: bool):
    """The value a reader sees when the last (or the first) of repeated keys wins."""
    if isinstance(v, Obj):
        out: dict = {}
        for k, x in v:
            if last or k not in out:
                out[k] = resolve(x, last=last)
        return out
    if isinstance(v, list):
        return [resolve(x, last=last) for x in v]
    return v


def repeats(v) -> int:
    if isinstance(v, Obj):
        keys = [k for k, _ in v]
        return len(keys) - len(set(keys)) + sum(repeats(x) for _, x in v)
    if isinstance(v, list):
        return sum(map(repeats, v))
    return 0


def kept_repeats(v, *, last: bool) -> int:
    """Repeats inside the members that survive (the removed ones take theirs along)."""
    if isinstance(v, Obj):
        chosen: dict = {}
        for k, x in v:
            if last or k not in chosen:
                chosen[k] = x
        removed = len(v) - len(chosen)
        return removed + sum(kept_repeats(x, last=last) for x in chosen.values())
    if isinstance(v, list):
        return sum(kept_repeats(x, last=last) for x in v)
    return 0


def no_repeats(text: str) -> None:
    def hook(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"repeated key in {text!r}"
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)


@settings(max_examples=150, deadline=None)
@given(value=JSONISH.map(lambda v: Obj([("x", v)])))
def test_last_key_wins(value) -> None:
    text = dump(value)
    out, dropped = last_key_wins(text)
    no_repeats(out)
    assert json.loads(out) == resolve(value, last=True)
    assert len(dropped) == kept_repeats(value, last=True)
    if not repeats(value):
        assert out == text and not dropped


@settings(max_examples=150, deadline=None)
@given(value=JSONISH.map(lambda v: Obj([("x", v)])), data=st.data())
def test_first_key_wins_in_any_chunks(value, data) -> None:
    text = dump(value)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=10))))
    f = FirstKeyWins()
    out = "".join(f.feed(text[a:b]) for a, b in zip([0, *cuts], [*cuts, len(text)]))
    no_repeats(out)
    assert json.loads(out) == resolve(value, last=False)
    assert len(f.dropped) == kept_repeats(value, last=False)
    whole = FirstKeyWins()
    assert whole.feed(text) == out


def test_deep_nesting_is_walked_without_recursion() -> None:
    text = '{"a":' + "[" * 5000 + '{"k":1,"k":2}' + "]" * 5000 + "}"
    out, dropped = last_key_wins(text)
    assert out == '{"a":' + "[" * 5000 + '{"k":2}' + "]" * 5000 + "}"
    assert dropped == [("k", '"k":1')]
    f = FirstKeyWins()
    assert f.feed(text) == '{"a":' + "[" * 5000 + '{"k":1}' + "]" * 5000 + "}"
