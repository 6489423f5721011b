"""Offline token counting, without importing litellm.

tiktoken downloads its encodings on first use, which fails offline. litellm
ships `cl100k_base` and `o200k_base` in its package data; we point
TIKTOKEN_CACHE_DIR there (located with find_spec, which does not import
litellm) before the first `get_encoding`. Counts are an estimate for
non-OpenAI models, which is all the budget and compaction logic needs.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# Per-message framing overhead in the chat format (role, separators).
_MESSAGE_OVERHEAD = 4


def _bundled_tokenizer_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(path) if path.is_dir() else None


def ensure_offline_tiktoken() -> None:
    """Make tiktoken load its encodings from litellm's bundled copies."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    bundled = _bundled_tokenizer_dir()
    if bundled:
        os.environ["TIKTOKEN_CACHE_DIR"] = bundled


@functools.lru_cache(maxsize=1)
def _encoding() -> Any:
    ensure_offline_tiktoken()
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # no encoding available offline: fall back to a length estimate
        return None


def count_text(text: str) -> int:
    """Tokens in a piece of text (cl100k estimate; ~4 chars a token without tiktoken)."""
    if not text:
        return 0
    enc = _encoding()
    if enc is None:
        return max(1, len(text) // 4)
    return len(enc.encode(text, disallowed_special=()))


def count_message(message: Mapping[str, Any]) -> int:
    """Tokens of one chat message, tool calls included."""
    total = _MESSAGE_OVERHEAD + count_text(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        total += count_text(str(fn.get("name", ""))) + count_text(str(fn.get("arguments", "")))
    return total


def count_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    return sum(count_message(m) for m in messages) + 3


def count_tools(tools: list[dict[str, Any]] | None) -> int:
    """Rough cost of tool schemas in the prompt (they are serialised into it)."""
    return count_text(json.dumps(tools)) if tools else 0
