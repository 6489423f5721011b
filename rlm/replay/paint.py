"""Colour for plain-text reports, decided by rich: a terminal only, NO_COLOR and TERM=dumb respected.

Reports that write line by line (verify, rerun, the stderr reporter) colour a
few words; rich decides whether the stream gets colour at all and renders
the style, so no module writes escape codes by hand. What is painted is made
visible first (rlm.text.visible): the only escapes written are the style's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from rlm.text.visible import visible

Paint = Callable[[str, str], str]  # (text, rich style such as "red" or "dim") -> text to write


def painter(out: TextIO) -> Paint:
    """A function that styles text for `out`, or returns it unchanged where colour is off."""
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, emoji=False)
    if (
        not console.is_terminal
        or console.no_color
        or console.is_dumb_terminal
        or console.color_system is None
    ):
        return lambda text, style: visible(text)

    def paint(text: str, style: str) -> str:
        with console.capture() as captured:
            console.print(Text(visible(text), style=style), end="", soft_wrap=True)
        return captured.get()

    return paint
