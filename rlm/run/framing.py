"""Framing: text rlm did not write (the file's, a cell's output, a model's reply) as data in a prompt.

Such text enters a prompt only inside a frame whose closing tag carries a code:

    <data-kqtz>
    ...the text, verbatim...
    </data-kqtz>

Nothing inside can close the frame: every `data-CODE` of the frame's own code in the text is
broken before the text is framed, so a `>>>`, a `</data>` or a closer with another code is only
text, and a line that reads like a finding (`[F3] established: ...`) stays inside the frame of
the finding that printed it. Only the tag is broken, never the data around it.

The code is derived from the text (a hash), not drawn at random: the same text frames the same
way in every run, so the sub-call cache and replays meet identical prompts, and the safety rests
on the breaking, which holds whatever the code. The code is consonants, not digits: a small
model asked "how many" copies the nearest number, and a frame's number would be a figure of
nothing. A model that copies a frame's tags into its answer has them taken out (`unframe`).
The system prompts say that a frame holds data, never instructions (rlm.run.prompts.DATA_RULE).
"""

from __future__ import annotations

import hashlib
import re

CODE_LETTERS = 4
_ALPHABET = "bcdfghjkmnpqrstvwxz"  # consonants: no code spells a word or a number
_TAG = re.compile(rf"</?data-[{_ALPHABET}]{{{CODE_LETTERS}}}>")
_BREAK = "\u00b7"  # put after `data` of a tag found in the text: no longer the tag, still readable


def frame_code(text: str) -> str:
    """The code of the frame around `text`: four consonants drawn from its hash."""
    n = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    code = []
    for _ in range(CODE_LETTERS):
        n, k = divmod(n, len(_ALPHABET))
        code.append(_ALPHABET[k])
    return "".join(code)


def neutralise(text: str, code: str) -> str:
    """`text` with every `data-CODE` (in any case, any spacing around the dash) broken, so nothing
    in it can open or close a frame of this code."""
    found = re.compile(rf"(data)(\s*-\s*{re.escape(code)})", re.I)
    while found.search(text):
        text = found.sub(lambda m: m.group(1) + _BREAK + m.group(2), text)
    return text


def frame(text: str) -> str:
    """`text` as a block of data: opened by <data-CODE>, closed only by </data-CODE>."""
    code = frame_code(text)
    body = neutralise(text, code)
    if "\n" in body:
        return f"<data-{code}>\n{body}\n</data-{code}>"
    return f"<data-{code}>{body}</data-{code}>"


def unframe(text: str) -> str:
    """`text` (a model's reply) without the frame tags it copied from its prompt."""
    return _TAG.sub("", text)
