"""prefix_cache: an encoding that reuses a cached prefix has exactly the ids and offsets of one
whole encode, on every shared tokenizer; and render_prompt builds the same prompts (text, ids,
isolated spans) with the cache as without it, along an agent's growing conversation."""

from __future__ import annotations

import contextlib
import os
import threading
from array import array

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
    assert len(cache._leaves) <= 3 and cache._tokens <= 10_000
    _consistent(cache)
    short = "<|im_start|>user\nhi<|im_end|>"
    assert len(tok.encode(short)) < MIN_TOKENS
    before = _held(cache)
    cache.encode(short)
    assert _held(cache) == before, "a short prompt is not kept"


def _held(cache: PrefixCache) -> set[tuple[str, str]]:
    """(partition, the text up to a leaf's end) for every leaf: the prompts the cache holds."""
    held = set()
    for leaf in cache._leaves:
        node, text = leaf, ""
        while node is not None:
            text = node.text + text
            node = node.parent
        held.add((leaf.partition, text))
    return held


def test_an_extended_prompt_replaces_the_one_it_extends():
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    turn = f"<|im_start|>system\n{FILLER}<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    cache.encode(turn)
    cache.encode(turn + "Hi.<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")
    assert len(cache._leaves) == 1 and cache.hits == 1


def test_a_shared_beginning_is_held_once():
    """A team's prompts (one system prompt, each its own user turn) hold the system prompt's
    tokens once, not once per prompt; and an encoding's ids are its own: changing them changes
    nothing the cache gives the next prompt."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    system = f"<|im_start|>system\n{FILLER * 4}<|im_end|>\n<|im_start|>user\n"
    shared = len(tok.hf.encode(system, add_special_tokens=False).ids)
    for k in range(20):
        text = system + f"task {k}<|im_end|>\n<|im_start|>assistant\n"
        got = cache.encode(text)
        assert got.ids == tok.hf.encode(text, add_special_tokens=False).ids
        got.ids[:shared] = [0] * shared  # a caller's own list
        _consistent(cache)
    assert cache.hits == 19 and len(cache._leaves) == 20
    assert shared < cache._tokens < shared + 20 * 20


def test_ids_past_the_vocabulary_size_are_kept_as_they_are():
    """A reused run's ids become a list of the cache's int objects, one per id up to the
    vocabulary's size; an id past it (a tokenizer whose ids have gaps) keeps its own int."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    cache._ints = list(range(1000))  # as if the vocabulary had 1,000 ids: most of these are past it
    system = f"<|im_start|>system\n{FILLER * 4}<|im_end|>\n<|im_start|>user\n"
    for k in range(3):
        _check(cache, tok, system + f"task {k}<|im_end|>\n")
    assert cache.hits == 2 and all(type(n.ids) is list for n in cache._roots[""].children)


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
    """The trees hold what their links say: each node's text, ids, offsets and cuts continue its
    parent's; children are sorted by text; the leaves are exactly the nodes without children; the
    token count is the nodes' own; no root is empty."""
    nodes, leaves = 0, set()
    tokens = 0
    for part, root in cache._roots.items():
        assert root.partition == part and root.children, "an empty root is let go"
        stack = [root]
        while stack:
            node = stack.pop()
            assert [c.text for c in node.children] == sorted(c.text for c in node.children)
            for child in node.children:
                assert child.parent is node and child.alive and child.partition == part
                assert child.start == node.end and child.end == child.start + len(child.text)
                assert child.base == (node.counts[-1] if node.cuts else 0)
                assert child.cuts and child.cuts[-1] == child.end and child.cuts == sorted(set(child.cuts))
                assert child.counts[-1] - child.base == len(child.ids) and len(child.offsets) == 2 * len(child.ids)
                assert child.offsets[0] >= child.start and child.offsets[-1] == child.end
                tokens += len(child.ids)
                nodes += 1
                if not child.children:
                    leaves.add(child)
                stack.append(child)
    assert leaves == set(cache._leaves)
    assert tokens == cache._tokens


def test_an_agents_every_turn_reuses_the_turn_before():
    """Each turn extends the last and replaces its entry; the replacement stays findable (it was
    once left out of its bucket, so the third turn missed)."""
    tok = tokenizer("qwen3")
    cache = PrefixCache(tok.hf)
    conv = f"<|im_start|>system\n{FILLER}<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    for turn in range(6):
        _check(cache, tok, conv)
        _consistent(cache)
        assert cache.hits == turn and len(cache._leaves) == 1
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
    """The furthest cut the cache holds of `cached` inside what it shares with `text` (its nodes
    found by reading every child, not by the cache's own search)."""
    node, held = cache._roots.get(""), []
    while node is not None:
        node = next((c for c in node.children if cached.startswith(c.text, c.start)), None)
        held += node.cuts if node is not None else []
    shared = len(os.path.commonprefix([cached, text]))
    return max((c for c in held if c <= shared), default=0)


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
    assert len([leaf for leaf in cache._leaves if leaf.partition == "other"]) == 1


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
        assert not cache._flights and not cache._roots
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


_WIDE = st.one_of(st.characters(), st.sampled_from("\ud800\udbff\udc00\udfff\ue000\uffff\xff\x00"))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(a=st.text(_WIDE), b=st.text(_WIDE), c=st.text(_WIDE), pos=st.integers(0, 30))
def test_shared_counts_what_a_run_shares_at_any_width(a, b, c, pos):
    """`_shared` (slices compared at one width) is the common prefix's length, for strings of
    any widths (a shared ASCII run after a wide character, lone surrogates included)."""
    from chatsieve.prefix_cache import _shared

    for run in (b, a + b, a + c, a):
        for text in (a + b, c + a + b, a):
            at = min(pos, len(text))
            assert _shared(text, at, run) == len(os.path.commonprefix([text[at:], run]))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(runs=st.sets(st.text("ab\u00e9\U0001f326", min_size=1, max_size=140), min_size=1, max_size=12),
       text=st.text("ab\u00e9\U0001f326", max_size=160), pos=st.integers(0, 3))
def test_the_children_beside_a_text_share_the_most_with_it(runs, text, pos):
    """Among sorted runs, `_beside` returns one sharing the longest prefix with `text[pos:]`
    (compared by widths that double, so never a whole long shared run at once)."""
    from chatsieve.prefix_cache import _beside, _Node, _shared

    children = [_Node(None, 0, r, 0, [], array("I"), [], [], "") for r in sorted(runs)]
    best = max(_shared(text, min(pos, len(text)), r) for r in runs)
    got = _beside(children, text, min(pos, len(text)))
    assert got and max(_shared(text, min(pos, len(text)), c.text) for c in got) == best
