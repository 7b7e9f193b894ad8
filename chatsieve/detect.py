"""The format a chat template writes (`chatsieve.formats.detect`): probe conversations are
rendered through the template and the markup it writes is read back with each registered format.

A format is a candidate only if it reads the probe's calls back exactly (one call with typed
arguments, two parallel calls, the two call-id shapes templates expect); candidates are ranked by
what else the rendering shows (a reasoning turn read back, where the generation prompt leaves the
model, the turn's end marker, the control markers the format knows) and by how close the rendering
is to the known templates of each format (`chatsieve.detect_known`, rendered from the test data).
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .formats import registry as formats
from .spec import FormatSpec

__all__ = ["Candidate", "Detection", "FormatMatch", "Rendering", "analyze", "detect", "probe", "transcript"]

# Sentinels: ordinary words no template writes by itself, so their places in a rendering are found.
SYSTEM = "Answer as SYSQ7."
USER = "Weather in Paris? USRQ1"
USER2 = "Thanks. USRQ2"
RESULT = "RESQ5 sunny"
REASONING = "RSNQ3 the user wants the weather"
ANSWER = "ANSQ4 It is sunny."
CALL_ARGS = {"city": "Paris", "days": 3, "metric": True}
PARALLEL = (("get_weather", {"city": "Oslo", "days": 2, "metric": False}), ("get_time", {"tz": "UTC"}))
_IDS = ("abcDEF123", "functions.{name}:{index}")  # Mistral's nine alphanumerics; Kimi K2's native ids

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city."},
            "days": {"type": "integer", "description": "Days ahead."},
            "metric": {"type": "boolean", "description": "Metric units."}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "description": "The zone."}},
                       "required": ["tz"]}}},
]  # fmt: skip

# the switches templates read for thinking (on, off)
_SWITCHES = (("enable_thinking", True, False), ("thinking", True, False))
# control-looking markup in a rendering: <|x|>, <｜x｜>, <x>, </x>, [X], ]<]x[>[ ...
_CONTROL = re.compile(r"<\|[^|<>\n]{1,40}\|>|<｜[^｜\n]{1,40}｜>|</?[A-Za-z_][\w:.|-]{0,40}>|\[/?[A-Z_]{3,}\]")
_KNOWN_THRESHOLD = 0.97  # a template that renders no call is placed only this close to a known one
MAX_TEMPLATE = 1 << 20


@dataclass(frozen=True)
class Candidate:
    """A registered format scored against a template: higher is nearer; `fits` is False when it
    cannot read the template's calls back."""

    name: str
    score: float
    fits: bool
    why: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.name} ({self.score:.2f}: {'; '.join(self.why)})"


@dataclass(frozen=True)
class FormatMatch:
    """The format a template writes: `name` resolves with `chatsieve.formats.get`; `evidence` says why."""

    name: str
    evidence: tuple[str, ...]
    score: float
    runners_up: tuple[Candidate, ...] = ()

    @property
    def spec(self) -> FormatSpec:
        return formats.get(self.name)

    def describe(self) -> str:
        return f"{self.name}: " + "; ".join(self.evidence)


@dataclass(frozen=True)
class Detection:
    """What `analyze` found: the match (or None) and every candidate, nearest first."""

    match: FormatMatch | None
    candidates: tuple[Candidate, ...]
    problem: str = ""  # why nothing was placed

    def nearest(self, n: int = 3) -> list[str]:
        return [c.name for c in self.candidates[:n]]

    def explain(self) -> str:
        if self.match is not None:
            return self.match.describe()
        near = ", ".join(str(c) for c in self.candidates[:3]) or "none"
        return f"no registered format writes this template's markup ({self.problem}); nearest: {near}"


@dataclass
class Rendering:
    """The probe conversations as one template renders them."""

    prompt: str = ""  # the generation prompt after the system and user turns (default switches)
    call: list[tuple[str, str]] = field(default_factory=list)  # (prompt, generated): one call, per id shape
    parallel: list[tuple[str, str]] = field(default_factory=list)  # two calls, per id shape
    reasoning: tuple[str, str] | None = None  # (prompt, generated) of a reasoning + answer turn
    thinking_prompts: list[str] = field(default_factory=list)  # generation prompts with each switch
    conversation: str = ""  # a whole tool conversation, from the first user turn on
    source: str = ""  # the template itself
    errors: list[str] = field(default_factory=list)

    @property
    def renders_calls(self) -> bool:
        return any("Paris" in gen for _, gen in self.call)

    @property
    def renders_parallel(self) -> bool:
        return any("Oslo" in gen and "UTC" in gen for _, gen in self.parallel)


# ---- rendering -------------------------------------------------------------------------------


def _now(fmt: str) -> str:
    return datetime(2026, 1, 15).strftime(fmt)  # a fixed date: renderings compare across days


def _variables(tokenizer: Any) -> dict:
    bos = eos = None
    if tokenizer is not None:
        bos, eos = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "eos_token", None)
    return {"bos_token": bos or "<s>", "eos_token": eos or "</s>", "strftime_now": _now}


def _calls(pairs, id_shape: str) -> list[dict]:
    return [
        {"id": id_shape.format(name=name, index=i), "type": "function", "function": {"name": name, "arguments": dict(args)}}
        for i, (name, args) in enumerate(pairs)
    ]


def _render(source: str, messages: list[dict], variables: dict, add_generation_prompt: bool) -> str | None:
    from .prompt.context import prepare_messages
    from .prompt.errors import PromptError
    from .prompt.template import call_shape, render_chat_template

    shape = call_shape(source)
    try:
        msgs = prepare_messages(messages, shape.objects, shape.null_content)
        return render_chat_template(source, msgs, TOOLS, None, add_generation_prompt, variables)
    except PromptError:
        return None


def _turn(source: str, head: list[dict], turn: dict, variables: dict) -> tuple[str, str] | None:
    """(prompt, generated): the assistant `turn` as the text after the generation prompt. Both
    renderings are compared from the last user turn on (some templates write the tools before it)."""
    prompt = _render(source, head, variables, True)
    full = _render(source, [*head, turn], variables, False)
    if prompt is None or full is None:
        return None
    pa, fa = prompt.rfind(USER), full.rfind(USER)
    if pa < 0 or fa < 0:
        pa = fa = 0
    cut = len(os.path.commonprefix([prompt[pa:], full[fa:]]))
    while cut and cut < len(prompt) - pa and full[fa + cut - 1] not in "\n>":
        cut -= 1  # a generation prompt that opens a block history leaves out: cut at its start
    return prompt[: pa + cut], full[fa + cut :]


def probe(chat_template: str, tokenizer: Any = None) -> Rendering:
    """Render the probe conversations through `chat_template`."""
    variables = _variables(tokenizer)
    head = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    r = Rendering(source=chat_template)
    r.prompt = _render(chat_template, head, variables, True) or ""
    if not r.prompt:
        head = head[1:]  # templates without a system role
        r.prompt = _render(chat_template, head, variables, True) or ""
        if not r.prompt:
            r.errors.append("the template does not render a system and user turn")
            return r
    for id_shape in _IDS:
        one = _turn(chat_template, head, {"role": "assistant", "content": "",
                                          "tool_calls": _calls([("get_weather", CALL_ARGS)], id_shape)}, variables)
        if one is not None:
            r.call.append(one)
        two = _turn(chat_template, head, {"role": "assistant", "content": "", "tool_calls": _calls(PARALLEL, id_shape)},
                    variables)
        if two is not None:
            r.parallel.append(two)
    r.reasoning = _turn(chat_template, head, {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING},
                        variables)
    for var, on, off in _SWITCHES:
        for value in (on, off):
            p = _render(chat_template, head, {**variables, var: value}, True)
            if p is not None and p != r.prompt:
                r.thinking_prompts.append(p)
    call = _calls([("get_weather", CALL_ARGS)], _IDS[0])
    conversation = [*head, {"role": "assistant", "content": "", "tool_calls": call},
                    {"role": "tool", "tool_call_id": call[0]["id"], "name": "get_weather", "content": RESULT},
                    {"role": "assistant", "content": ANSWER}, {"role": "user", "content": USER2}]
    text = _render(chat_template, conversation, variables, True)
    if text is None:  # templates that refuse a tool role or calls
        text = _render(chat_template, [*head, {"role": "assistant", "content": ANSWER},
                                       {"role": "user", "content": USER2}], variables, True) or ""
    at = text.find(USER)
    r.conversation = text[at:] if at >= 0 else text
    return r


def transcript(r: Rendering) -> str:
    """The parts of a rendering that say how a family writes its turns (compared with known ones):
    the conversation from the first user turn on, the call turns, the generation prompts' tails."""
    parts = [r.conversation]
    parts += [gen for _, gen in r.call[:1]] + [gen for _, gen in r.parallel[:1]]
    if r.reasoning is not None:
        parts.append(r.reasoning[1])
    parts += [p[-40:] for p in (r.prompt, *r.thinking_prompts)]
    return "\x00".join(parts)


# ---- scoring ---------------------------------------------------------------------------------


_PIECE = re.compile(r"<[^<>\n]{1,40}>|\w+|\s+|[^\w\s]")


@functools.lru_cache(maxsize=4096)
def _pieces(text: str) -> tuple[str, ...]:
    return tuple(_PIECE.findall(text))


def likeness(a: str, b: str) -> float:
    """How alike two transcripts are, 0..1: matching pieces (tags, words, runs of space) in order."""
    return difflib.SequenceMatcher(None, _pieces(a), _pieces(b), autojunk=False).ratio()


def _read(spec: FormatSpec, text: str, prompt: str, thinking: bool | None = None):
    from .parser import parse

    try:
        return parse(text, spec, tools=TOOLS, prompt=prompt, thinking=thinking)
    except Exception:  # noqa: BLE001 - a format that cannot read the probe is no candidate
        return None


def _calls_read(spec: FormatSpec, turns: list[tuple[str, str]], want: list[tuple[str, dict]]) -> bool:
    for prompt, gen in turns:
        msg = _read(spec, gen, prompt)
        if msg is not None and [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == want:
            return True
    return False


def _opens_reasoning(prompt: str) -> bool | None:
    """True when the generation prompt ends inside a reasoning block a registered format knows;
    False when it closes one; None when it says nothing."""
    tail = prompt[-200:]
    best_open = best_close = -1
    for spec in _specs():
        for m in spec.reasoning_open:
            best_open = max(best_open, tail.rfind(m))
        for m in spec.reasoning_close:
            best_close = max(best_close, tail.rfind(m))
    if best_open < 0 and best_close < 0:
        return None
    return best_open > best_close


def _reasoning_markers(r: Rendering) -> set[str]:
    """The registered formats' reasoning markers the template writes (history, prompts)."""
    text = "\x00".join([r.conversation, r.reasoning[1] if r.reasoning else "", r.prompt[-200:],
                        *(p[-200:] for p in r.thinking_prompts)])
    marks = {m for spec in _specs() for m in (*spec.reasoning_open, *spec.reasoning_close)}
    found = {m for m in marks if m in text}
    # a marker inside a longer one found (`<think>` in `<seed:think>`) is not written by itself
    return {m for m in found if not any(m != o and m in o and text.count(m) == text.count(o) for o in found)}


_SUFFIX = re.compile(r"<tool_calls(:[^<>|\s]{1,40})>")


def _suffixed(r: Rendering, tokenizer: Any) -> list[FormatSpec]:
    """The suffixed families (`hy_v4:SUFFIX`, ...) for each tag suffix the template writes or the
    tokenizer's vocabulary holds (a checkpoint's own suffix), unless registered already."""
    text = "\x00".join([r.conversation, *(gen for _, gen in r.call)])
    suffixes = set(_SUFFIX.findall(text))
    added = getattr(tokenizer, "added_tokens", None)
    if callable(added):
        try:
            suffixes |= {m.group(1) for t in added() if (m := _SUFFIX.fullmatch(t))}
        except Exception:  # noqa: BLE001 - a tokenizer that cannot list them adds nothing
            pass
    registered = set(formats.names())
    out = []
    for family in formats.suffixed_families():
        for suffix in sorted(suffixes):
            spec = formats.get(family + suffix)
            if spec.name not in registered:
                out.append(spec)
    return out


def _specs() -> list[FormatSpec]:
    return [formats.get(n) for n in formats.names()]


def _score(spec: FormatSpec, r: Rendering, known: list[str], mine: str) -> Candidate:
    why: list[str] = []
    score = 0.0
    fits = True
    if r.renders_calls:
        if _calls_read(spec, r.call, [("get_weather", CALL_ARGS)]):
            score += 3
            why.append("reads the probe call back")
        else:
            fits = False
            why.append("does not read the template's call")
        if r.renders_parallel:
            if _calls_read(spec, r.parallel, [(n, a) for n, a in PARALLEL]):
                score += 1
                why.append("and two parallel calls")
            else:
                fits = False
                why.append("does not read its parallel calls")
    if r.reasoning is not None and REASONING in r.reasoning[1]:
        prompt, gen = r.reasoning
        msg = _read(spec, gen, prompt, thinking=True)
        if msg is not None and msg.reasoning == REASONING and msg.content == ANSWER:
            score += 1
            why.append("reads its reasoning turn back")
        else:
            score -= 1
    opens = _opens_reasoning(r.prompt)
    if opens is not None:
        msg = _read(spec, "Xq", r.prompt)
        starts = "reasoning" if msg is not None and msg.reasoning == "Xq" else "content"
        if not opens and spec.default_thinking == (starts == "reasoning") and not spec.default_thinking:
            score += 0.25
            why.append("thinks only when asked, as the template's default prompt says")
        if (starts == "reasoning") == opens:
            score += 0.5
            why.append(f"starts in {starts} where the generation prompt leaves the model")
        else:
            score -= 1
        if opens:  # and without the prompt (an engine that does not pass it): its own default
            msg = _read(spec, "Xq", None)
            if msg is not None and msg.reasoning == "Xq":
                score += 0.5
                why.append("starts in reasoning by default, as the template's prompt does")
    written = _reasoning_markers(r)
    if not written and opens is None and not any(m in r.source for m in (*spec.reasoning_open, *spec.reasoning_close)):
        msg = _read(spec, "Xq", None)
        if msg is not None and msg.reasoning == "Xq":
            score -= 1.5
            why.append("starts in reasoning, and the template never names its reasoning markers")
    unknown = sorted(written - set(spec.reasoning_open) - set(spec.reasoning_close))
    if unknown:
        score -= 2
        why.append(f"does not know the reasoning markers it writes ({', '.join(unknown)})")
    controls = set(_CONTROL.findall(r.conversation))
    if controls:
        known_marks = {m for m in controls if any(m in d or d in m for d in spec.delimiters)}
        share = len(known_marks) / len(controls)
        score += share
        if known_marks:
            why.append(f"knows {len(known_marks)} of the {len(controls)} control markers it writes")
    if known and (fits or not r.renders_calls):  # closeness ranks candidates; it cannot rescue a misfit
        ratio = max(likeness(mine, k) for k in known)
        score += 3 * max(0.0, ratio - 0.6) / 0.4  # only real likeness counts: 60% is any two chat templates
        why.append(f"{ratio:.0%} like {spec.name}'s known template")
    return Candidate(spec.name, round(score, 4), fits, tuple(why))


def _known() -> dict[str, list[str]]:
    from .detect_known import KNOWN

    return KNOWN


def analyze(chat_template: str | Path | None, tokenizer: Any = None) -> Detection:
    """Every registered format scored against `chat_template` (its source, or a path; None: the
    tokenizer's own template), with the match if one places it."""
    source = _source(chat_template, tokenizer)
    r = probe(source, tokenizer)
    if r.errors:
        return Detection(None, (), "; ".join(r.errors))
    mine = transcript(r)
    known = _known()
    ranked = sorted(
        (_score(spec, r, known.get(spec.name, []), mine) for spec in [*_specs(), *_suffixed(r, tokenizer)]),
        key=lambda c: (c.fits, c.score),
        reverse=True,
    )
    best = ranked[0]
    if not best.fits:
        return Detection(None, tuple(ranked), "no registered format reads the calls it writes")
    if not r.renders_calls:
        near = max((likeness(mine, k) for k in known.get(best.name, [])), default=0.0)
        if near < _KNOWN_THRESHOLD:
            return Detection(None, tuple(ranked), "it renders no tool call, and is like no known template")
    runners = tuple(c for c in ranked[1:4] if c.fits)
    return Detection(FormatMatch(best.name, best.why, best.score, runners), tuple(ranked))


def detect(chat_template: str | Path | None, tokenizer: Any = None) -> FormatMatch | None:
    """The registered format whose markup `chat_template` writes, or None (see `analyze` for the
    nearest candidates)."""
    return analyze(chat_template, tokenizer).match


AUTO = "auto"
_RESOLVED: dict[str, str] = {}


class FormatNotFound(ValueError):
    """`auto` could not place a chat template; the message names the nearest formats."""


def resolve(name: str, tokenizer: Any = None, chat_template: str | None = None) -> str:
    """A format name as given, canonical; `auto`: the format `chat_template` (default: the
    tokenizer's) writes, found once per template. FormatNotFound when it cannot be placed."""
    if name != AUTO:
        return formats.get(name).name
    source = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if not isinstance(source, str) or not source:
        raise FormatNotFound("format 'auto' needs the model's chat template, and there is none: name the format")
    if source not in _RESOLVED:
        found = analyze(source, tokenizer)
        if found.match is None:
            raise FormatNotFound(f"format 'auto': {found.explain()}; name the format instead")
        _RESOLVED[source] = found.match.name
    return _RESOLVED[source]


def _source(chat_template: str | Path | None, tokenizer: Any) -> str:
    if isinstance(chat_template, Path):
        chat_template = chat_template.read_text(encoding="utf-8")
    if chat_template is None and tokenizer is not None:
        chat_template = getattr(tokenizer, "chat_template", None)
        if isinstance(chat_template, Mapping):
            chat_template = chat_template.get("default")
    if not isinstance(chat_template, str) or not chat_template.strip():
        raise ValueError("detect needs a chat template (its text, a path, or a tokenizer that carries one)")
    if len(chat_template) > MAX_TEMPLATE:
        raise ValueError(f"chat template of {len(chat_template)} characters: more than {MAX_TEMPLATE}")
    return chat_template


# ---- the known renderings (chatsieve/detect_known.py) ------------------------------------------


def read_template_file(path: Path) -> str:
    """A chat template from a `.jinja` file, a tokenizer_config.json (`.xz` too: its
    `chat_template`, the default one of a list), or a model directory holding either."""
    import lzma

    path = Path(path)
    if path.is_dir():
        for name in ("tokenizer_config.json", "tokenizer_config.json.xz", "chat_template.jinja"):
            if (path / name).is_file():
                try:
                    return read_template_file(path / name)
                except ValueError:
                    continue
        raise ValueError(f"{path}: no chat template (tokenizer_config.json or chat_template.jinja)")
    if path.suffix == ".gguf":
        from .gguf import read_metadata

        template = read_metadata(path).get("tokenizer.chat_template")
        if not isinstance(template, str):
            raise ValueError(f"{path}: the GGUF carries no tokenizer.chat_template")
        return template
    raw = lzma.open(path, "rt", encoding="utf-8").read() if path.suffix == ".xz" else path.read_text(encoding="utf-8")
    if ".json" in path.name:
        template = json.loads(raw).get("chat_template")
        if isinstance(template, list):
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise ValueError(f"{path}: no chat_template in it")
        return template
    return raw


def known_renderings(models: Path) -> dict[str, list[str]]:
    """Each registered format's template from the test data (`FormatSpec.template`), rendered."""
    from .testdata import default_dir

    out: dict[str, list[str]] = {}
    for spec in _specs():
        for ref in (spec.template, *spec.templates) if spec.template else spec.templates:
            path = models / ref
            if not path.exists() and ref.startswith("llama.cpp/"):
                path = default_dir() / ref
            out.setdefault(spec.name, []).append(transcript(probe(read_template_file(path))))
    return out


def write_known(models: Path) -> str:
    """chatsieve/detect_known.py's text for the test data in `models`."""
    lines = ['"""Known renderings of each format\'s template (`chatsieve.detect.transcript`), made by',
             "`python -m chatsieve.detect known MODELS`: detection ranks formats by how close a template's",
             'rendering is to these. tests/test_detect.py checks that it is current."""', "",
             "KNOWN: dict[str, list[str]] = {"]
    for name, texts in sorted(known_renderings(models).items()):
        lines.append(f"    {name!r}: [")
        lines += [f"        {json.dumps(t, ensure_ascii=False)}," for t in texts]
        lines.append("    ],")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "known":
        sys.stdout.write(write_known(Path(sys.argv[2])))
    else:
        print("usage: python -m chatsieve.detect known MODELS_DIR > chatsieve/detect_known.py", file=sys.stderr)
        sys.exit(2)
