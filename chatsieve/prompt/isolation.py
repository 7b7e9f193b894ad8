"""Marker isolation: a delimiter spelled inside caller-supplied strings is tokenized as ordinary
sub-word pieces, so the model never reads it as the control token.

`render_prompt` gives the text and token ids transformers' `apply_chat_template` gives, except
that a delimiter (e.g. `<tool_call>`) spelled inside caller-supplied strings is tokenized as
ordinary sub-word pieces, so the model never reads it as the control token.

Isolation, precisely:

* Scope: every string the caller supplies in `messages` (content, text parts, reasoning, tool
  results, tool-call arguments, names), `tools`, `documents` and `request_variables` (template
  variables from a request, at any depth), dict keys included (a tool schema's property names
  come from third parties too) -- but not the trusted template keywords (`enable_thinking=...`
  passed by the program itself). The template's own text keeps its ids. Request variables may
  not name a variable the renderer or the tokenizer owns (`bos_token`, `add_generation_prompt`,
  the template helpers, ...), and the switches in `BOOLEAN_VARIABLES` must be booleans
  (`TemplateVariableError`).
* Delimiters: `markers` if given (exactly those); else the format's `delimiters`
  (`chatsieve.formats`) plus every control token of the tokenizer: each added token except
  whitespace runs (Gemma's "▁▁") and non-special HTML tags (Gemma's `<table>`, `<b>`), which
  ordinary text is meant to produce. Only delimiters that are added tokens can become a single
  id, so only those are isolated (a delimiter string that merely *contains* an added token
  isolates that token). Each must encode to exactly its id, or the prompt is refused.
* Method: the prompt is rendered twice, once as given and once with every delimiter occurrence in
  those strings wrapped in private-use marker characters (never present in the input or the
  template: a forged marker makes another one be chosen; if the markers do not survive the
  template -- Python's repr, as Apriel's `tool|string`, escapes private-use characters -- once
  more with printable ones, Yi syllables, which repr keeps). Removing the markers from the second
  rendering must give the first -- exactly, or up to whitespace only (a marker beside a delimiter
  can stop a template's `strip()`; the non-whitespace characters are then matched one to one);
  otherwise the template reacted to the markers (e.g. `content.startswith('<tool_call>')`) and
  `PromptError` is raised (fail closed). A delimiter the template itself cut out of a string
  (Qwen3 splitting assistant content at `</think>`) leaves lone markers that mark nothing.
  The rendering is then encoded once with the real
  tokenizer, with offsets. Every token whose id is a delimiter's and whose characters came from a
  marked occurrence -- or were assembled across a boundary of a caller string (adjacent text parts,
  a string and the template text; such strings carry an extra marker at that edge) -- is replaced
  by the encoding of the same characters with a copy of the tokenizer that has no added tokens.
* Guarantee: `Prompt.token_ids` equals the plain encoding of `Prompt.text` token for token,
  except that each isolated delimiter token is replaced by its ordinary pieces; the replaced ranges
  are `Prompt.isolated_spans`. Because the tokenizer already cuts the text at every added-token
  match, no token straddles an isolated span's boundary and the tokens on either side are exactly
  the plain tokens -- there is no boundary effect. Content without delimiters gives the plain ids.
  No isolated span contains a delimiter id (checked after assembly).
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _json, prefix_cache, shared
from ..tokenizer import Tokenizer
from .errors import PromptError
from .template import format_spec

# Marker characters are taken from the end of plane 16 (private use), skipping any in the input;
# where a template prints caller strings with Python's repr (Apriel's `tool|string`), which
# escapes private-use characters, from the end of the Yi syllables (printable, caseless letters).
_MARKER_RANGES = ((0x10FFFD, 0xF0000), (0xA48C, 0xA000))


@dataclass(frozen=True)
class _Delimiters:
    ids: dict[str, int]           # delimiter text -> its added-token id
    pattern: re.Pattern[str]      # longest first
    prefixes: frozenset[str]      # proper prefixes, to find delimiters cut at a string's edge
    suffixes: frozenset[str]
    longest: int                  # length of the longest delimiter
    id_set: frozenset[int] = frozenset()
    # Over caller strings joined by NUL: a string that `_mark_string` may change matches
    # (a delimiter inside, or a stripped head/tail that is part of one); None: NUL in a delimiter
    maybe_marked: re.Pattern[str] | None = None


_DELIMITER_CACHE: dict[tuple[int, tuple[str, ...]], tuple[Any, _Delimiters | None]] = {}


_WANTED_CACHE: dict[tuple[int, str | None], tuple[Any, tuple[str, ...]]] = {}


def _active_delimiters(tok: Tokenizer, format: str | None, markers: Sequence[str] | None) -> _Delimiters | None:
    if markers is not None:
        wanted: tuple[str, ...] = tuple(markers)
    else:
        hit = _WANTED_CACHE.get((id(tok), format))  # (its added tokens are fixed when it is made)
        if hit is not None and hit[0] is tok:
            wanted = hit[1]
        else:
            # The format's delimiters, and every control token of the tokenizer (Qwen3's
            # <|vision_start|>, <|fim_prefix|>, <|file_sep|>, ... are not in its delimiter list).
            own = tuple(format_spec(format).delimiters) if format is not None else ()
            wanted = own + tuple(t for t in _control_tokens(tok) if t not in own)
            if len(_WANTED_CACHE) >= 32:
                _WANTED_CACHE.pop(next(iter(_WANTED_CACHE)), None)
            _WANTED_CACHE[(id(tok), format)] = (tok, wanted)
    key = (id(tok.hf), wanted)
    hit = _DELIMITER_CACHE.get(key)
    if hit is not None and hit[0] is tok.hf:
        return hit[1]
    found = _find_delimiters(tok, wanted)
    if len(_DELIMITER_CACHE) >= 32:
        _DELIMITER_CACHE.pop(next(iter(_DELIMITER_CACHE)))
    _DELIMITER_CACHE[key] = (tok.hf, found)
    return found


# HTML elements some vocabularies hold as added tokens (Gemma's `<table>`, `<b>`): ordinary text
# is meant to produce them, so a non-special one is never isolated.
_HTML_ELEMENTS = frozenset(
    "a b i u s p em strong sub sup code pre span div br hr img html body head header footer nav "
    "table caption thead tbody tfoot tr th td h1 h2 h3 h4 h5 h6 blockquote ul ol li dl dt dd iframe".split()
)
_TAG = re.compile(r"</?([a-z][a-z0-9]*)>")


def _control_tokens(tok: Tokenizer) -> list[str]:
    """Every added token that callers' text is not meant to produce: all of them except
    whitespace runs (Gemma's "▁▁") and non-special HTML tags."""
    special = {t.content for t in _added_token_objects(tok) if getattr(t, "special", True)}
    out = []
    for text in tok.added_tokens():
        if not text or not text.replace("\u2581", " ").strip():
            continue
        tag = _TAG.fullmatch(text)
        if tag is not None and tag.group(1) in _HTML_ELEMENTS and text not in special:
            continue
        out.append(text)
    return out


def _added_token_objects(tok: Tokenizer) -> list[Any]:
    try:
        return list(tok.hf.get_added_tokens_decoder().values())
    except Exception:  # a tokenizer without the table: treat every added token as special
        return []


def _find_delimiters(tok: Tokenizer, wanted: tuple[str, ...]) -> _Delimiters | None:
    added = tok.added_tokens()
    chosen: dict[str, int] = {}
    for text in wanted:
        if not isinstance(text, str) or not text or text.isspace():
            continue
        if text in added:
            chosen[text] = added[text]
        else:
            # A delimiter that is not itself an added token can only carry an added token inside it.
            for content, i in added.items():
                if content and not content.isspace() and content in text:
                    chosen[content] = i
    if not chosen:
        return None
    for text, i in chosen.items():
        got = tok.encode(text)
        if got != [i]:
            raise PromptError(
                f"delimiter {text!r} does not encode to its single token id {i} (got {got}); "
                "cannot isolate it safely"
            )
    prefixes = frozenset(d[:k] for d in chosen for k in range(1, len(d)))
    suffixes = frozenset(d[k:] for d in chosen for k in range(1, len(d)))
    maybe = None
    if not any("\x00" in d for d in chosen):
        alternatives = [_trie_pattern(chosen)]
        if suffixes:
            alternatives.append(r"(?:^|\x00)\s*" + _trie_pattern(sorted(suffixes)))
        if prefixes:
            alternatives.append(_trie_pattern(sorted(prefixes)) + r"\s*(?:\x00|\Z)")
        maybe = re.compile("|".join(f"(?:{a})" for a in alternatives))
    return _Delimiters(
        ids=chosen,
        pattern=re.compile(_trie_pattern(chosen)),
        prefixes=prefixes,
        suffixes=suffixes,
        longest=max(map(len, chosen)),
        id_set=frozenset(chosen.values()),
        maybe_marked=maybe,
    )


def _trie_pattern(words: Sequence[str]) -> str:
    """A regex matching any of `words`, longest first, as a trie: a vocabulary's thousands of
    added tokens cost one walk per position, not one attempt per token."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = True

    def build(node: dict) -> str:
        ends = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if ends else body

    return build(trie)


# Strings at least this long are scanned for delimiters once per content (a system prompt that every
# request of an agent repeats), then looked up: hashing is far cheaper than the scan.
_SCAN_MEMO_CHARS = 512
_SCAN_MEMO_SIZE = 256
_SCANNED: dict[tuple[str, str], bool] = {}  # (the delimiters' pattern, string) -> found
_TOOLS_SCANNED: dict[tuple[str, bytes], bool] = {}  # (the pattern, tools as JSON) -> found
_SCAN_LOCK = threading.Lock()


def _may_need_marks(delims: _Delimiters, msgs: Any, tools: Any, docs: Any, untrusted: Any,
                    decoded_json: bool) -> bool:
    """Whether some caller string may need a marker (`_mark_string`): a delimiter inside it, or a
    head or tail that is part of one (`_Delimiters.maybe_marked`, string by string)."""
    pattern = delims.maybe_marked
    if pattern is None:
        return True
    if tools and shared.is_shared(tools):  # a caller's kept tools (chatsieve/shared.py): scanned once
        if shared.once(tools, ("isolation scan", pattern.pattern), _scan_strings, pattern):
            return True
        tools = None
    elif tools and decoded_json:  # a team's agents send the same tools: scanned once per content
        try:
            key = (pattern.pattern, _json.dumps(tools))
        except (TypeError, ValueError):
            key = None
        found = _TOOLS_SCANNED.get(key) if key is not None else None
        if found is None:
            found = _scan(pattern, _strings(tools))
            if key is not None:
                _remember(_TOOLS_SCANNED, key, found)
        if found:
            return True
        tools = None
    return _scan(pattern, _strings(msgs) + _strings(tools) + _strings(docs) + _strings(untrusted))


def _scan_strings(value: Any, pattern: re.Pattern[str]) -> bool:
    return _scan(pattern, _strings(value))


def _scan(pattern: re.Pattern[str], strings: list[str]) -> bool:
    short = []
    for s in strings:
        if len(s) < _SCAN_MEMO_CHARS:
            short.append(s)
            continue
        key = (pattern.pattern, s)
        found = _SCANNED.get(key)
        if found is None:
            found = pattern.search(s) is not None
            _remember(_SCANNED, key, found)
        if found:
            return True
    # joined by NUL, which the pattern's edge alternatives take as a string's start or end
    return bool(short) and pattern.search("\x00".join(short)) is not None


def _remember(memo: dict, key: Any, value: bool) -> None:
    with _SCAN_LOCK:
        if len(memo) >= _SCAN_MEMO_SIZE:
            memo.pop(next(iter(memo)), None)
        memo[key] = value


def _strings(obj: Any) -> list[str]:
    """Every string in `obj` (dict keys too), depth first."""
    out: list[str] = []
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            out.append(o)
        elif isinstance(o, dict):
            for k, v in reversed(o.items()):
                stack.append(v)
                stack.append(k)
        elif isinstance(o, list | tuple):
            stack.extend(reversed(o))
    return out


@dataclass(frozen=True)
class _Markers:
    open: str   # before a delimiter found in caller text
    close: str  # after it
    edge: str   # at the edge of a caller string that could complete a delimiter outside it

    @property
    def all(self) -> str:
        return self.open + self.close + self.edge


def _pick_markers(*texts: str, kind: int = 0) -> _Markers:
    """Three characters of `_MARKER_RANGES[kind]` that none of `texts` holds."""
    top, bottom = _MARKER_RANGES[kind]
    used = set(re.findall(f"[{chr(bottom)}-{chr(top)}]", "".join(texts)))
    picked = [chr(cp) for cp in range(top, bottom - 1, -1) if chr(cp) not in used][:3]
    if len(picked) < 3:  # pragma: no cover - the input would hold every character of the range
        raise PromptError("cannot isolate delimiters: the input uses every marker character")
    return _Markers(*picked)


def _mark_string(s: str, delims: _Delimiters, mk: _Markers) -> tuple[str, bool]:
    if delims.maybe_marked is not None and delims.maybe_marked.search(s) is None:
        return s, False  # no delimiter inside, no edge that could be part of one
    marked = delims.pattern.sub(lambda m: mk.open + m.group(0) + mk.close, s)
    changed = marked != s
    # Edge markers go inside surrounding whitespace, so strip()/trim in templates still work.
    core = marked.strip()
    if core:
        lead = marked[: len(marked) - len(marked.lstrip())]
        trail = marked[len(marked.rstrip()):]
        longest = min(delims.longest, len(core) + 1)
        head = any(core[:k] in delims.suffixes for k in range(1, longest))
        tail = any(core[-k:] in delims.prefixes for k in range(1, longest))
        if head or tail:
            marked = lead + (mk.edge if head else "") + core + (mk.edge if tail else "") + trail
            changed = True
    return marked, changed


def _mark(obj: Any, delims: _Delimiters, mk: _Markers, flag: list[bool]) -> Any:
    if isinstance(obj, str):
        marked, changed = _mark_string(obj, delims, mk)
        if changed:
            flag[0] = True
        return marked
    if isinstance(obj, dict):
        # Keys too: a tool schema's property names come from third parties like its values.
        return {_mark(k, delims, mk, flag): _mark(v, delims, mk, flag) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mark(v, delims, mk, flag) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_mark(v, delims, mk, flag) for v in obj)
    return obj


_STRIPPED_CACHE: dict[int, tuple[Any, Any]] = {}


def _without_added_tokens(tok: Tokenizer):
    """A copy of the `tokenizers` object with no added tokens: everything encodes as sub-words."""
    hit = _STRIPPED_CACHE.get(id(tok.hf))
    if hit is not None and hit[0] is tok.hf:
        return hit[1]
    from tokenizers import Tokenizer as HFTokenizer

    try:
        # Same model (shared, read-only), same normalizer/pre-tokenizer/decoder, no added vocabulary.
        stripped = HFTokenizer(tok.hf.model)
        stripped.normalizer = tok.hf.normalizer
        stripped.pre_tokenizer = tok.hf.pre_tokenizer
        stripped.post_processor = tok.hf.post_processor
        stripped.decoder = tok.hf.decoder
    except Exception:
        stripped = None
    try:
        if stripped is None:  # a serialised copy, with its added tokens dropped
            spec = json.loads(tok.hf.to_str())
            spec["added_tokens"] = []
            stripped = HFTokenizer.from_str(json.dumps(spec))
        if stripped.get_added_tokens_decoder():
            raise ValueError("the copy still has added tokens")
    except Exception as e:
        raise PromptError(
            f"cannot copy the tokenizer to isolate delimiters ({type(e).__name__}: {e}); "
            "pass isolate_markers=False to build the prompt without isolation"
        ) from e
    if len(_STRIPPED_CACHE) >= 8:
        _STRIPPED_CACHE.pop(next(iter(_STRIPPED_CACHE)))
    _STRIPPED_CACHE[id(tok.hf)] = (tok.hf, stripped)
    return stripped


def _encode_as_text(tok: Tokenizer, text: str, delims: _Delimiters) -> list[int]:
    """Ordinary sub-word ids for `text` that decode back to it and hold no delimiter id."""
    stripped = _without_added_tokens(tok)
    forbidden = delims.id_set

    def ok(ids: list[int]) -> bool:
        return bool(ids) and not forbidden.intersection(ids) and tok.decode(ids) == text

    # Encode after a newline and drop it again, so a SentencePiece-style tokenizer adds no
    # leading space (as transformers' encode_marked_chat does).
    nl = stripped.encode("\n", add_special_tokens=False).ids
    ids = stripped.encode("\n" + text, add_special_tokens=False).ids
    if nl and ids[: len(nl)] == nl and ok(ids[len(nl):]):
        return ids[len(nl):]
    ids = stripped.encode(text, add_special_tokens=False).ids
    if ok(ids):
        return ids
    # Last resort: one character at a time (single characters never form a delimiter).
    ids = []
    for ch in text:
        part = stripped.encode("\n" + ch, add_special_tokens=False).ids
        part = part[len(nl):] if nl and part[: len(nl)] == nl else stripped.encode(ch, add_special_tokens=False).ids
        ids.extend(part)
    if ok(ids):
        return ids
    raise PromptError(
        f"the tokenizer copy still encodes {text!r} with a delimiter id (or not back to the same "
        "text); cannot isolate it: pass isolate_markers=False to opt out"
    )


class _Positions:
    """Where each character of the real rendering sits in the marked one (`span`), in memory
    proportional to the markers, not to the prompt (a long prompt has few)."""

    def __init__(self, before: list[int] | None = None, table: list[int | None] | None = None) -> None:
        self.before = before  # exact case: for the k-th marker, the real characters before it
        self.table = table  # whitespace case: per character, its index or None

    def span(self, a: int, b: int) -> list[int]:
        """Marked indices of real characters a..b (those that have one)."""
        if self.table is not None:
            return [j for j in self.table[a:b] if j is not None]
        assert self.before is not None
        return [i + bisect.bisect_right(self.before, i) for i in range(a, b)]


def _unmarked(marked: str, mk: _Markers) -> str:
    """`marked` without its markers."""
    return marked.translate({ord(c): None for c in mk.all})


def _align(real: str, marked: str, mk: _Markers) -> _Positions | None:
    """For each character of `real`, its index in `marked`, or None if the renderings disagree.

    Exact when `marked` minus the markers is `real`. Otherwise, when the two differ only in
    whitespace (a marker next to the content blocked a template's strip()), the non-whitespace
    characters are matched one to one, in order, and whitespace maps to None.
    """
    at = [m.start() for m in re.finditer("[" + re.escape(mk.all) + "]", marked)]
    if _unmarked(marked, mk) == real:
        return _Positions(before=[p - k for k, p in enumerate(at)])
    kept = [j for j, ch in enumerate(marked) if ch not in mk.all]
    solid = [j for j in kept if not marked[j].isspace()]
    real_solid = [i for i, ch in enumerate(real) if not ch.isspace()]
    if len(solid) != len(real_solid) or any(real[i] != marked[j] for i, j in zip(real_solid, solid, strict=True)):
        return None
    pos: list[int | None] = [None] * len(real)
    for i, j in zip(real_solid, solid, strict=True):
        pos[i] = j
    return _Positions(table=pos)


def _isolate(tok: Tokenizer, real: str, marked: str, pos: _Positions, mk: _Markers,
             delims: _Delimiters) -> tuple[list[int], list[tuple[int, int]]]:
    """Plain ids of `real`, with the delimiter tokens that came from caller text replaced."""
    # Characters of `marked` that belong to a delimiter found in caller text: `open delim close`.
    # A lone marker (the template split the string at the delimiter and dropped it) marks nothing.
    from_caller = bytearray(len(marked))
    pair = re.compile(re.escape(mk.open) + "(" + delims.pattern.pattern + ")" + re.escape(mk.close))
    for m in pair.finditer(marked):
        from_caller[m.start(1):m.end(1)] = b"\x01" * (m.end(1) - m.start(1))
    markers = set(mk.all)

    enc = _encode(tok, real)
    delimiter_ids = delims.id_set
    as_text: dict[str, list[int]] = {}  # a delimiter's ordinary pieces, once per distinct text
    plain = enc.ids
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    done = 0  # plain[:done] is in ids
    for i in [i for i, tid in enumerate(plain) if tid in delimiter_ids]:
        a, b = enc.span(i)
        where = pos.span(a, b)
        # From caller text, or assembled across the edge of a caller string (a marker sits
        # between its characters); a delimiter we cannot place is treated as caller text.
        if (not where or any(from_caller[j] for j in where)
                or not markers.isdisjoint(marked[where[0]:where[-1] + 1])):
            piece_text = real[a:b]
            pieces = as_text.get(piece_text)
            if pieces is None:
                pieces = as_text[piece_text] = _encode_as_text(tok, piece_text, delims)
            ids.extend(plain[done:i])
            done = i + 1
            spans.append((len(ids), len(ids) + len(pieces)))
            ids.extend(pieces)
    ids.extend(plain[done:])
    # After assembly: no isolated span may hold a delimiter id.
    for s, e in spans:
        if delimiter_ids.intersection(ids[s:e]):  # pragma: no cover - _encode_as_text checks this
            raise PromptError("an isolated span still holds a delimiter id; refusing to build the prompt")
    return ids, spans


def _encode(tok: Tokenizer, text: str) -> Any:
    """The whole prompt's encoding (ids and offsets), with the GIL released while the tokenizer
    works (`encode_batch` does, `encode` does not): a server thread rendering a long prompt then
    leaves the other requests running. The ids of an unchanged prefix of a recent prompt are
    reused (`prefix_cache`: the same ids as a whole encode)."""
    return prefix_cache.encode(tok.hf, text)


def isolated_ids(tok: Tokenizer, raw: str, text: str, rerender: Callable[[Any, Any, Any, dict], str],
                 finish: Callable[[str], str], *, format: str | None, markers: Sequence[str] | None, source: str,
                 messages: Any, tools: Any, documents: Any, trusted: dict, untrusted: dict, isolate: bool = True,
                 decoded_json: bool = False) -> tuple[str, list[int], list[tuple[int, int]]]:
    """The prompt text, its token ids with every delimiter spelled inside the caller's strings
    isolated, and the isolated spans (the module docstring says how). `raw` is the template's
    rendering of `messages`, `tools`, `documents` and the variables `trusted` and `untrusted` (a
    request's) with the template `source`; `text` is `finish(raw)`, the rendering with a family's
    fix-ups of the template's text (Gemma 4's turns); `rerender(messages, tools, documents,
    variables)` renders marked copies of the same data exactly as `raw` was rendered. A fix-up that
    acts on the caller's text in `text` (a spelled `<turn|>` read as the template's) is kept to the
    template's own text: the prompt is then the fixed-up marked rendering without its markers.
    `markers` are the delimiters (None: the format's and the tokenizer's control tokens).
    `isolate=False`: `text` and its plain encoding, as transformers gives it. Raises `PromptError`
    when the template reacts to the markers."""
    msgs, tools_p, docs_p = messages, tools, documents
    delims = _active_delimiters(tok, format, markers) if isolate else None

    ids: list[int] | None = None
    spans: list[tuple[int, int]] = []
    if delims is not None and _may_need_marks(delims, msgs, tools_p, docs_p, untrusted, decoded_json):
        caller = _strings(msgs) + _strings(tools_p) + _strings(docs_p) + _strings(untrusted)
        for kind in range(len(_MARKER_RANGES)):
            flag = [False]
            mk = _pick_markers(source, text, *caller, *_strings(trusted), kind=kind)
            marked_msgs = _mark(msgs, delims, mk, flag)
            marked_tools = _mark(tools_p, delims, mk, flag)
            marked_docs = _mark(docs_p, delims, mk, flag)
            marked_vars = {**trusted, **{k: _mark(v, delims, mk, flag) for k, v in untrusted.items()}}
            if not flag[0]:
                break  # no delimiter in caller text: the plain encoding is the prompt
            marked_raw = rerender(marked_msgs, marked_tools, marked_docs, marked_vars)
            marked = finish(marked_raw)
            pos = _align(text, marked, mk)
            if pos is None and (text != raw or marked != marked_raw) and _unmarked(marked_raw, mk) == raw:
                # the template wrote the caller's text alike; the fix-up did not (it read a delimiter
                # the caller spelled as the template's): the fix-ups where the markers left them
                text = _unmarked(marked, mk)
                pos = _align(text, marked, mk)
            if pos is not None:
                ids, spans = _isolate(tok, text, marked, pos, mk, delims)
                break
        else:
            raise PromptError(
                "cannot isolate delimiters in this conversation: the chat template renders the "
                "content differently once its delimiters are marked (it inspects or rewrites them); "
                "remove the delimiters from the content, or pass isolate_markers=False"
            )
    if ids is None:
        ids = _encode(tok, text).ids
    return text, ids, spans
