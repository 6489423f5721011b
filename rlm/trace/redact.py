"""Secret redaction for everything rlm writes: traces, --json output, stderr.

API keys reach us through provider environment variables and flags; a model
or an error message can echo them back. We scrub the known values and the
well-known key shapes before anything is written.
"""

from __future__ import annotations

import os
import re
from typing import Any

_KEY_ENV_HINTS = ("API_KEY", "_TOKEN", "SECRET", "ACCESS_KEY", "_KEY")
_MIN_SECRET_LEN = 8
MASK = "[REDACTED]"

_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),  # OpenAI / Anthropic style keys
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),  # AWS access key ids
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),  # Google API keys
    re.compile(r"\b(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._\-~+/=]{8,}"),
    re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|sig)=)[^&\s\"']+"),
    re.compile(r"(?i)(\b(?:x-api-key|api-key|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{8,}"),
]


def _secret_values() -> list[str]:
    values = []
    for name, value in os.environ.items():
        upper = name.upper()
        if any(h in upper for h in _KEY_ENV_HINTS) and len(value) >= _MIN_SECRET_LEN:
            values.append(value)
    extra = os.environ.get("RLM_API_KEY")
    if extra:
        values.append(extra)
    # Longest first, so a key that contains another is masked whole.
    return sorted(set(values), key=len, reverse=True)


_extra_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret that did not come from the environment (e.g. --api-key)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _extra_secrets.add(value)


def _scrub(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    for pattern in _PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


def _all_secrets() -> list[str]:
    return sorted(set(_secret_values()) | _extra_secrets, key=len, reverse=True)


def redact_text(text: str) -> str:
    if not text:
        return text
    return _scrub(text, _all_secrets())


def redact(obj: Any) -> Any:
    """Redact every string inside a JSON-like structure (the secrets are looked up once)."""
    secrets = _all_secrets()

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _scrub(value, secrets) if value else value
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(obj)
