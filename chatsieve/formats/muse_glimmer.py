"""Meta Muse Glimmer: harmony-like messages `<|start|>assistant to=RECIPIENT<|message|>BODY`, each
ended by `<|eom|>` (more follow in this turn) or `<|eot|>` (the turn is over). `to=self` is
reasoning, `to=user` (or no recipient) the answer, any other recipient a tool call whose body is
ATEM XML: `<atem:function_calls><atem:invoke name="F"><atem:parameter name="K">V</atem:parameter>
</atem:invoke></atem:function_calls>`. The generation prompt ends `<|start|>assistant`, so the
output begins with ` to=…`.

The header grammar is gpt-oss's (HarmonyEngine) with Muse's markers and recipients; ATEM markup in
a message to `self` or `user` is that message's text, never a call.
"""

from __future__ import annotations

from ..args.base import CallContext
from ..args.xml_kv import XmlKvSyntax, xml_kv_codec
from ..events import Dropped
from ..spec import FormatSpec
from .gpt_oss import BODY, CALLBODY, CONTENT, REASONING, HarmonyEngine

START, MESSAGE, EOM, EOT = "<|start|>", "<|message|>", "<|eom|>", "<|eot|>"
CALLS_OPEN, CALLS_CLOSE = "<atem:function_calls>", "</atem:function_calls>"
NEVER = "\x00"  # harmony markers Muse has not (`<|channel|>`, `<|constrain|>`)

ATEM_SYNTAX = XmlKvSyntax(
    call_open="<atem:invoke name=",
    name_close=(">",),
    call_close="</atem:invoke>",
    key_open="<atem:parameter name=",
    key_close=">",
    value_open="",
    value_close="</atem:parameter>",
    quoted=True,
    structural=(CALLS_CLOSE,),  # a turn or message end inside a value is held (the engine decides)
    # the block the template writes around the invokes: inside a value, an example's
    openers=(CALLS_OPEN,),
    closers=(CALLS_CLOSE,),
)
_AtemXml = xml_kv_codec("AtemXmlCodec", ATEM_SYNTAX)


class AtemCodec(_AtemXml):
    """A call message's body: the `<atem:function_calls>` tags around the invokes are the block's
    (plain text, as in every message); any other text outside an invoke is reported."""

    def close(self, *, truncated: bool) -> None:
        rest = "".join(self._junk)
        for tag in (CALLS_OPEN, CALLS_CLOSE):
            rest = rest.replace(tag, "", 1)
        self._junk = [rest] if rest.strip(" \t\r\n") else []
        super().close(truncated=truncated)


class MuseGlimmerEngine(HarmonyEngine):
    """HarmonyEngine with Muse's markers; the recipient decides what a message is."""

    START, CHANNEL, MESSAGE, CONSTRAIN = START, NEVER, MESSAGE, NEVER
    MESSAGE_ENDS = (EOM,)
    RETURN = EOT

    def _open_body(self) -> None:
        self._initial = False
        cut_reasoning, self._analysis_open = self._analysis_open, False
        role, _, recipient = self._parse_header()
        raw = self._hraw
        if role not in (None, "assistant"):
            self._begin_drop(raw, f"a message from {role!r}, not the assistant; not shown")
        elif recipient in (None, "user"):
            self._begin_field(CONTENT)
        elif recipient == "self":
            self._begin_field(REASONING)
        elif cut_reasoning:
            # the reasoning message was never ended (`<|eom|>`): a call header inside it is
            # the model thinking about a call, not making one
            self.out.append(Dropped("".join(raw), "call header inside an unfinished reasoning message; not a call"))
            self._begin_field(REASONING)
        else:
            self._mode = BODY
            self._kind = CALLBODY
            self._region = AtemCodec(CallContext(self._tools, gated=self.gated))
            self._raw = list(raw)
            self._drain()

    def _begin_field(self, kind: str) -> None:
        super()._begin_field(kind)
        self._join = False  # several `to=self` messages read as one text (A + B = AB)


MUSE_GLIMMER = FormatSpec(
    name="muse_glimmer",
    description="Meta Muse Glimmer (harmony-like messages to self / user / a tool; ATEM XML calls)",
    aliases=("muse-glimmer", "glimmer", "meta_muse_glimmer", "muse"),
    default_thinking=True,
    inner=(START, MESSAGE, EOM),
    end=(EOT, "<|end_of_text|>"),
    strip=("<|begin_of_text|>",),
    engine=MuseGlimmerEngine,
    template="llama.cpp/models/templates/muse-glimmer.jinja",
    reasoning_doc="messages `to=self`",
    calls_doc='`<|start|>assistant to=F<|message|><atem:function_calls><atem:invoke name="F"><atem:parameter '
    'name="K">V</atem:parameter></atem:invoke></atem:function_calls><|eom|>`; `to=user` is the answer',
)

SPECS = (MUSE_GLIMMER,)
