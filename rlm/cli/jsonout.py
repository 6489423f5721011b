"""JSON documents on stdout, for scripts, and safe when stdout is a terminal.

JSON escapes only C0 controls: a C1 control (`\\x9b` is a CSI on many terminals) or a
bidi override from the file or a model would reach a terminal raw. On a terminal every
non-ASCII character is escaped the JSON way (`\\u009b` for U+009B: the same JSON value); into a pipe the text
stays as it is. Secrets of the environment are masked either way.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rlm.trace.redact import redact


def print_json(doc: Any, *, indent: int | None = None) -> None:
    """`doc` as one JSON document on stdout, redacted, ASCII-only on a terminal."""
    print(json.dumps(redact(doc), ensure_ascii=sys.stdout.isatty(), indent=indent), flush=True)
