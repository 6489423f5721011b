"""The modules model code may import: one list for the sandbox policy and the prompt.

Standard library only, and cheap to import: the parent reads it to write the
prompt, the worker to build the stand-ins (rlm.sandbox.worker.policy).
"""

from __future__ import annotations

ALLOWED_MODULES: tuple[str, ...] = (
    "base64",
    "bisect",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "math",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "textwrap",
    "time",
    "typing",
    "urllib.parse",
)
