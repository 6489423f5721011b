"""Secret redaction for everything rlm writes: traces, --json output, stderr, the answer.

What is protected are the secrets of the environment rlm runs in: the values of
provider key variables, a key given with --api-key (or `api_key` in the config),
and credentials written into --api-base (user:password@, ?api-key=...). A model
or an error message can echo them back; they are masked wherever rlm writes.

Text of the user's file is not a secret of rlm's: a signed URL's `?sig=...`, an
access key id or a bearer token in a log is the answer when it is asked for. So
nothing is masked by its shape, only by being one of the known values.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

_KEY_ENV_HINTS = ("API_KEY", "_TOKEN", "SECRET", "ACCESS_KEY", "_KEY", "PASSWORD")
# One search per variable name: the environment is read again for every trace event.
_KEY_ENV_HINT = re.compile("|".join(map(re.escape, _KEY_ENV_HINTS)))
_MIN_SECRET_LEN = 8
MASK = "[REDACTED]"
# Query parameters of an endpoint URL that carry a credential (Azure's api-key, key=, ...).
_URL_KEY_PARAMS = ("key", "api-key", "api_key", "apikey", "token", "access_token", "sig", "signature", "code")


def _secret_values() -> list[str]:
    values = [
        value
        for name, value in os.environ.items()
        if len(value) >= _MIN_SECRET_LEN and _KEY_ENV_HINT.search(name.upper())
    ]
    extra = os.environ.get("RLM_API_KEY")
    if extra:
        values.append(extra)
    return values


_extra_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret that did not come from the environment (e.g. --api-key)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _extra_secrets.add(value)


def _url_secrets(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
        found += [v for k, v in parse_qsl(parts.query) if k.lower() in _URL_KEY_PARAMS]
    except ValueError:
        return []
    return [v for v in found if v]


def register_url_secrets(url: str | None) -> None:
    """Remember the credentials written into an endpoint URL (--api-base): its password and
    its key-bearing query parameters. (Shorter than a key, they could not be told from
    the file's text; the recorded URL drops them all, see `url_without_secrets`.)"""
    if url:
        for value in _url_secrets(url):
            register_secret(value)


def url_without_secrets(url: str | None) -> str | None:
    """The endpoint URL as a trace may record it: no user:password@, key parameters masked."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        query = "&".join(
            f"{k}={MASK}" if k.lower() in _URL_KEY_PARAMS else f"{k}={v}"
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return MASK


def _scrub(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    return text


def _all_secrets() -> list[str]:
    # Longest first, so a key that contains another is masked whole.
    return sorted(set(_secret_values()) | _extra_secrets, key=len, reverse=True)


def redact_text(text: str) -> str:
    if not text:
        return text
    return _scrub(text, _all_secrets())


def redact(obj: Any) -> Any:
    """Redact every string inside a JSON-like structure (the secrets are looked up once)."""
    return _redact_with(obj, _all_secrets())


def redact_dumps(obj: Any, dump: Callable[[Any], str]) -> str:
    """`dump(obj)`, JSON text, with every secret in its strings masked as `redact` masks them.

    Serialised first, and walked only when a secret's text is in the result: a string that
    holds a secret holds its JSON-escaped form in the text, so a text without any is the
    text of the redacted object. Most events hold none, and serialising is done in C
    where walking is done in Python: this is what keeps a trace's writing cheap."""
    secrets = _all_secrets()
    text = dump(obj)
    if any(form in text for value in secrets for form in _json_forms(value)):
        text = dump(_redact_with(obj, secrets))
    return text


def _json_forms(value: str) -> set[str]:
    """How a secret may appear in JSON text: as it is, escaped, escaped to ASCII."""
    return {value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1]}


def _redact_with(obj: Any, secrets: list[str]) -> Any:
    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _scrub(value, secrets) if value else value
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(obj)
