"""Text made safe to show on a terminal: every control character made visible.

A file, a model's reply and a trace from elsewhere are data; written raw to a
terminal, their escape sequences would clear the screen, set the window title,
write the clipboard (OSC 52), hide a link (OSC 8), overprint a line (`\\r`,
backspace) or reorder it (bidi overrides). `visible` turns every such character
into a readable escape, in the form Python itself uses (`\\x1b`, `\\x9b`,
`\\u202e`), so what is shown says exactly which character was there.

Kept: `\\n`, `\\t`, and `\\r` directly before `\\n` (a CRLF line end moves the
cursor nowhere a newline would not). Made visible: the other C0 controls, DEL,
the C1 controls (U+0080-U+009F: `\\x9b` alone is a CSI on many terminals), the
bidirectional controls and line/paragraph separators, and lone surrogates (a
byte the decoder could not read, which a surrogateescape stream would write
back raw). A backslash already in the text is left as it is: this is a view
for a person, and the exact value stays available (stdout into a pipe, --json).

Worker-safe: standard library only, nothing imported at call time.
"""

from __future__ import annotations

import re

# One character class, one pass: a text with nothing to escape costs one C-level scan.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0 but \t \n and CR, DEL, C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks, embeddings, overrides, isolates
    "\u2028\u2029"  # line and paragraph separators
    "\ud800-\udfff]"  # lone surrogates (undecodable bytes kept by surrogateescape)
    "|\r(?!\n)"  # a CR that is not a line end returns the cursor: overprinting
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every character that could drive or reorder a terminal shown as an escape."""
    return _UNSAFE.sub(_escape, text)
