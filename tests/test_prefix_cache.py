"""prefix_cache: an encoding that reuses a cached prefix has exactly the ids and offsets of one
whole encode, on every shared tokenizer; and render_prompt builds the same prompts (text, ids,
isolated spans) with the cache as without it, along an agent's growing conversation."""

from __future__ import annotations

import contextlib
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import tokenizer
from test_prompt_isolation import FAMILIES, TOOLS, _contents, conversation, template
from test_prompt_isolation import tokenizer as chat_tokenizer

from chatsieve import prefix_cache
from chatsieve.prefix_cache import MIN_TOKENS, PrefixCache
from chatsieve.prompt import render_prompt

NAMES = [
    "qwen3", "gemma4", "gemma3", "gpt-oss", "llama3", "deepseek", "deepseek_v4", "kimi_k2", "glm5",
    "llama4", "hunyuan", "mistral",
]
FILLER = "The forecast shows light rain, clearing by noon. 明天有小雨。 Ünïcödé 🌦️ x = [1, 2]\n" * 12


def _fragments(tok) -> list[str]:
    added = sorted(t for t in tok.added_tokens() if t)
    cuts = sorted(PrefixCache(tok.hf)._cut_ids.values())
    some = cuts[:6] + added[:4] + added[-4:]
    broken = [t[: len(t) // 2] for t in some] + [t[len(t) // 2 :] for t in some]
    words = [" the", "the", " ", "  ", "\n", "\n\n", " \n", "é", "中文", "🌦️", "{", '"', "<", "|>", "user", "assistant"]
    return some + broken + words


def _check(cache: PrefixCache, tok, text: str) -> None:
    got = cache.encode(text)
    want = tok.hf.encode(text, add_special_tokens=False)
    assert got.ids == want.ids, f"ids differ for {text[-200:]!r}"
    assert got.offsets == want.offsets


@pytest.mark.parametrize("name", NAMES)
def test_encode_with_a_cached_prefix_is_a_whole_encode(name):
    tok = tokenizer(name)
    cache = PrefixCache(tok.hf)
    assert cache._cut_ids, f"{name}: no control token qualifies as a cut"
    frags = st.lists(st.sampled_from(_fragments(tok)), max_size=25).map("".join)

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(first=frags, second=frags, third=frags, data=st.data())
    def run(first, second, third, data):
        text = FILLER + first
        _check(cache, tok, text)
        cut = data.draw(st.integers(0, len(text)))
        _check(cache, tok, text[:cut] + second)  # a prompt that shares a prefix, then differs
        _check(cache, tok, text + second + third)  # one that extends it (the agent's next turn)
        _check(cache, tok, text)  # the same one again

    run()
    assert cache.hits > 20, f"{name}: the cached prefix was reused only {cache.hits} times"


def test_the_rest_is_not_encoded_as_the_first_piece():
    """A SentencePiece-style pre-tokenizer marks only the text's first piece (`▁hello` alone,
    `he llo` after a control token): the rest is encoded after its cut token, never alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    hf.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "[INST]", "[/INST]", "</s>"])
    hf.train_from_iterator([FILLER, "hello world user assistant"] * 20, trainer)
    assert hf.encode("hello").tokens != hf.encode("[/INST]hello").tokens[1:]
    cache = PrefixCache(hf)
    first = "[INST]" + "hello world " * 200 + "[/INST]hello</s>"
    for text in (first, first[: first.index("[/INST]") + 7] + "hello world", first + "[INST]user"):
        got, want = cache.encode(text), hf.encode(text, add_special_tokens=False)
        assert (got.ids, got.offsets) == (want.ids, want.offsets)
    assert cache.hits == 2


def test_cut_tokens_are_the_turn_markers():
    cuts = set(PrefixCache(tokenizer("qwen3").hf)._cut_ids.values())
    assert {"<|im_start|>", "<|im_end|>"} <= cuts
    assert "<think>" not in cuts  # not special: a normalized-or-not judgement the cache does not make
    gpt_oss = set(PrefixCache(tokenizer("gpt-oss").hf)._cut_ids.values())
    assert {"<|start|>", "<|end|>", "<|message|>"} <= gpt_oss


def test_bounds_are_kept():
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf, max_entries=3, max_tokens=10_000)
    for i in range(10):
        cache.encode(f"<|im_start|>system\n{FILLER}{i}<|im_end|>\n<|im_start|>user\n{i}" * 2)
    assert len(cache._entries) <= 3 and cache._tokens <= 10_000
    assert sum(len(b) for b in cache._buckets.values()) == len(cache._entries)
    short = "<|im_start|>user\nhi<|im_end|>"
    assert len(tok.encode(short)) < MIN_TOKENS
    before = dict(cache._entries)
    cache.encode(short)
    assert dict(cache._entries) == before, "a short prompt is not kept"


def test_an_extended_prompt_replaces_the_one_it_extends():
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    turn = f"<|im_start|>system\n{FILLER}<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    cache.encode(turn)
    cache.encode(turn + "Hi.<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")
    assert len(cache._entries) == 1 and cache.hits == 1


def test_a_partition_reuses_only_its_own_prefixes():
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    turn = f"<|im_start|>system\n{FILLER}<|im_end|>\n<|im_start|>user\n"
    with prefix_cache.partition("alice"):
        first = cache.encode(turn + "hello")
    with prefix_cache.partition("bob"):
        assert cache.encode(turn + "hello").ids == first.ids and cache.hits == 0
    with prefix_cache.partition("alice"):
        assert cache.encode(turn + "again").ids == tok.hf.encode(turn + "again", add_special_tokens=False).ids
    assert cache.hits == 1
    assert cache.encode(turn + "x").ids and cache.hits == 1  # outside a block: partition "", its own


@contextlib.contextmanager
def _no_cache():
    prefix_cache.configure(max_entries=0)
    try:
        yield
    finally:
        prefix_cache.configure()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_render_prompt_is_the_same_with_and_without_the_cache(family):
    rel, fam_kw, _, _ = FAMILIES[family]
    tok = chat_tokenizer(family)
    args = {"tokenizer": tok, "template": template(rel), "tools": TOOLS, **fam_kw}
    system = "You are a careful agent. " + FILLER
    hits = []

    @settings(max_examples=15, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(user=_contents(family), tool=_contents(family), more=st.lists(_contents(family), max_size=3))
    def run(user, tool, more):
        # an agent's turns: each request repeats the conversation so far and adds to it
        conv = conversation(family, system=system, user="u " + user, tool="t " + tool)
        turns = [conv[:2], conv[:4], conv]
        for extra in more:
            conv = [*conv, {"role": "assistant", "content": "Done: " + extra}, {"role": "user", "content": extra}]
            turns.append(conv)
        cached = [render_prompt(t, **args) for t in turns]
        hits.append(prefix_cache.cache_for(tok.hf).hits)
        with _no_cache():
            plain = [render_prompt(t, **args) for t in turns]
        for c, p in zip(cached, plain, strict=True):
            assert c.text == p.text
            assert c.token_ids == p.token_ids
            assert c.isolated_spans == p.isolated_spans

    run()
    assert sum(hits) >= 15, f"the cache reused a prefix only {sum(hits)} times"


def _consistent(cache: PrefixCache) -> None:
    """Every entry is in its bucket, every bucket entry is an entry, and buckets are sorted."""
    in_buckets = [e for b in cache._buckets.values() for e in b]
    assert sorted(map(id, in_buckets)) == sorted(map(id, cache._entries.values()))
    for key, bucket in cache._buckets.items():
        assert bucket and all(e.bucket == key for e in bucket)
        assert [e.text for e in bucket] == sorted(e.text for e in bucket)


def test_an_agents_every_turn_reuses_the_turn_before():
    """Each turn extends the last and replaces its entry; the replacement stays findable (it was
    once left out of its bucket, so the third turn missed)."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    conv = f"<|im_start|>system\n{FILLER}<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    for turn in range(6):
        _check(cache, tok, conv)
        _consistent(cache)
        assert cache.hits == turn and len(cache._entries) == 1
        conv += f"Done {turn}.<|im_end|>\n<|im_start|>user\nnext {turn}<|im_end|>\n<|im_start|>assistant\n"


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(tails=st.lists(st.sampled_from(["a", "b", "ab", "ba", "<|im_end|>", "\n", "é", " x"]).map(
    lambda t: f"<|im_start|>user\n{t}<|im_end|>\n"), min_size=1, max_size=8), data=st.data())
def test_siblings_in_one_bucket_reuse_the_longest_shared_prefix(tails, data):
    """Many prompts with one system prompt (one bucket): each new one reuses as much as any cached
    one shares with it, found among its neighbours in text order, and the ids stay exact."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf, max_entries=data.draw(st.integers(2, 12)))
    system = f"<|im_start|>system\n{FILLER}<|im_end|>\n"
    texts = []
    for k in range(data.draw(st.integers(2, 16))):
        text = system + "".join(data.draw(st.permutations(tails))) + f"<|im_start|>user\n{k}"
        shared = max((_shared_cut(cache, t, text) for t in texts[-cache.max_entries:]), default=0)
        before = cache.reused_tokens
        _check(cache, tok, text)
        _consistent(cache)
        if shared:  # at least what the best cached prompt offers (a better one may have replaced it)
            assert cache.reused_tokens - before >= len(tok.hf.encode(text[:shared], add_special_tokens=False).ids)
        texts.append(text)


def _shared_cut(cache: PrefixCache, cached: str, text: str) -> int:
    """The furthest cut of `cached` inside what it shares with `text`, if `cached` is still held."""
    entry = cache._entries.get(("", cached))
    if entry is None:
        return 0
    shared = len(os.path.commonprefix([cached, text]))
    return max((c for c in entry.cuts if c <= shared), default=0)


def test_a_burst_tokenizes_its_shared_prefix_once():
    """Prompts that share a long beginning, encoded at once by several threads with nothing
    cached: one is encoded whole, the others wait for it and reuse its prefix (ids exact); a
    prompt of another partition neither waits for nor reuses them."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    system = f"<|im_start|>system\n{FILLER * 4}<|im_end|>\n<|im_start|>user\n"
    texts = [system + f"task {k}<|im_end|>\n<|im_start|>assistant\n" for k in range(8)]
    start = threading.Barrier(len(texts) + 1)
    got: dict[int, list[int]] = {}

    def encode(k: int) -> None:
        with prefix_cache.partition("team" if k < len(texts) else "other"):
            start.wait()
            got[k] = cache.encode(texts[k % len(texts)]).ids

    threads = [threading.Thread(target=encode, args=(k,)) for k in range(len(texts) + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, ids in got.items():
        assert ids == tok.hf.encode(texts[k % len(texts)], add_special_tokens=False).ids
    assert cache.hits == len(texts) - 1, "the team's shared prefix was encoded more than once"
    assert len([e for e in cache._entries.values() if e.partition == "other"]) == 1


def test_on_the_event_loop_an_encode_tokenizes_little_and_never_waits():
    """Inside `on_event_loop(n)`: an encode whose uncached rest is at most n characters is exact
    (and reuses the cache); a longer one, or one that would wait for a prompt being encoded,
    raises WouldBlock and leaves no flight behind; outside the block the same encodes run."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    limit = 200
    system = f"<|im_start|>system\n{FILLER * 4}<|im_end|>\n<|im_start|>user\n"
    first = system + "first task<|im_end|>\n<|im_start|>assistant\n"
    with prefix_cache.on_event_loop(limit):
        with pytest.raises(prefix_cache.WouldBlock):
            cache.encode(first)  # nothing cached: all of it to tokenize
        assert not cache._flights and not cache._entries
        _check(cache, tok, "<|im_start|>user\nshort<|im_end|>\n")  # short enough whole
    _check(cache, tok, first)  # in a thread, as the server then does
    hits = cache.hits
    with prefix_cache.on_event_loop(limit):
        _check(cache, tok, system + "second task<|im_end|>\n<|im_start|>assistant\n")  # the rest is short
        assert cache.hits == hits + 1
        with pytest.raises(prefix_cache.WouldBlock):
            cache.encode(system + "x" * (limit + 1))
        assert not cache._flights
        # a prompt sharing a long beginning is being encoded (by another thread): no waiting here
        other = f"<|im_start|>system\n{FILLER * 8}"
        cache._flights.append(prefix_cache._Flight("", other))
        with pytest.raises(prefix_cache.WouldBlock):
            cache.encode(other + "<|im_end|>\n")
        cache._flights.clear()
    uncached = PrefixCache(tok.hf, max_entries=0)
    with prefix_cache.on_event_loop(limit), pytest.raises(prefix_cache.WouldBlock):
        uncached.encode(first)
    _check(uncached, tok, first)


def test_on_the_event_loop_a_long_prompt_is_not_counted_in_pieces():
    """truncation.min_tokens encodes a very long text piece by piece: not on the event loop."""
    from chatsieve.prompt.truncation import min_tokens

    tok = tokenizer("qwen3")
    text = "word " * 40_000
    with prefix_cache.on_event_loop(2048), pytest.raises(prefix_cache.WouldBlock):
        min_tokens(tok, text, 1000)
    assert min_tokens(tok, text, 1000) > 1000


@settings(max_examples=300, deadline=None, derandomize=True)
@given(a=st.text(st.one_of(st.characters(), st.sampled_from("\ud800\udbff\udc00\udfff\ue000\uffff"))),
       b=st.text(st.one_of(st.characters(), st.sampled_from("\ud800\udbff\udc00\udfff\ue000\uffff"))))
def test_buckets_sort_by_bytes_as_by_characters(a, b):
    """A bucket is sorted by its texts' UTF-8 (fast to compare at any string width): the same
    order as the texts', lone surrogates included."""
    from chatsieve.prefix_cache import _order

    shared = "共有 🌦️ prefix " * 3
    for x, y in ((a, b), (shared + a, shared + b)):
        assert (x < y) == (_order(x) < _order(y))
        assert (x == y) == (_order(x) == _order(y))
