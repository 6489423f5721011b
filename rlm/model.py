"""Model calls: the only module that imports litellm, and only when a call is made.

litellm's import takes ~2 s and has side effects, so it is imported lazily
with its pitfalls handled first: a local cost map (no fetch), production mode
(no `.env` loading), offline tiktoken, no debug banner on stdout.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm.errors import ConfigError, ProviderError
from rlm.tokens import count_messages, count_text, count_tools, ensure_offline_tiktoken

_lock = threading.Lock()
_litellm_module: Any = None


def load_litellm() -> Any:
    """Import litellm once, configured for offline, quiet, production use."""
    global _litellm_module
    with _lock:
        if _litellm_module is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            os.environ["LITELLM_MODE"] = "PRODUCTION"
            ensure_offline_tiktoken()
            import litellm

            litellm.suppress_debug_info = True
            litellm.drop_params = True
            litellm.telemetry = False
            from rlm.scripted import register_scripted_provider

            register_scripted_provider(litellm)
            _litellm_module = litellm
    return _litellm_module


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it


@dataclass
class Reply:
    """One model answer, with what it cost."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    latency_s: float = 0.0
    model: str = ""
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls],
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reply:
        return cls(
            content=d.get("content") or "",
            tool_calls=[ToolCall(c["id"], c["name"], c["arguments"]) for c in d.get("tool_calls") or []],
            finish_reason=d.get("finish_reason"),
        )


_RETRYABLE_NAMES = (
    "RateLimitError",
    "APIConnectionError",
    "Timeout",
    "InternalServerError",
    "ServiceUnavailableError",
    "APIError",
)


def _classify(exc: BaseException) -> str:
    """'config', 'retry' or 'fatal' for a litellm exception."""
    name = type(exc).__name__
    if name in ("AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        return "config"
    text = str(exc).lower()
    if "missing credentials" in text or "api_key client option must be set" in text:
        return "config"  # some providers report a missing key as a server error
    if name in ("ContextWindowExceededError", "BadRequestError", "UnprocessableEntityError"):
        return "fatal"
    if name in _RETRYABLE_NAMES or isinstance(exc, TimeoutError | ConnectionError):
        return "retry"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status == 429 or status >= 500):
        return "retry"
    return "fatal"


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


class ModelClient:
    """A litellm model with retries, usage accounting and offline token counts."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        request_timeout: float = 120.0,
        retries: int = 4,
        retry_base_delay: float = 1.0,
        temperature: float = 0.0,
        context_window: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.request_timeout = request_timeout
        self.retries = retries
        self.retry_base_delay = retry_base_delay
        self.temperature = temperature
        self._context_window = context_window
        self._sleep = sleep

    # -- capabilities -------------------------------------------------------
    def supports_tools(self) -> bool:
        """Native tool calling, as litellm knows it. A custom api_base is assumed not to."""
        if self.model.startswith("scripted/"):
            return True
        if self.api_base:
            return False
        litellm = load_litellm()
        try:
            return bool(litellm.supports_function_calling(model=self.model))
        except Exception:
            return False

    def context_window(self) -> int:
        if self._context_window:
            return self._context_window
        if not self.model.startswith("scripted/"):
            litellm = load_litellm()
            try:
                info = litellm.get_model_info(self.model)
                window = info.get("max_input_tokens") or info.get("max_tokens")
                if window:
                    self._context_window = int(window)
                    return self._context_window
            except Exception:
                pass
        self._context_window = 32_000
        return self._context_window

    def check_credentials(self) -> None:
        """Fail early, with exit code 4, when the provider's key is missing."""
        if self.api_base or self.api_key or self.model.startswith("scripted/"):
            return
        litellm = load_litellm()
        # An empty variable is no key, but litellm counts it as present.
        for name in [
            k for k, v in os.environ.items() if not v.strip() and k.endswith(("_API_KEY", "_TOKEN"))
        ]:
            del os.environ[name]
        try:
            env = litellm.validate_environment(model=self.model)
        except Exception:
            return
        missing = env.get("missing_keys") or []
        if missing:
            raise ConfigError(
                f"model {self.model!r} needs {', '.join(missing)} in the environment (or pass --api-key)"
            )

    def estimate_prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> int:
        return count_messages(messages) + count_tools(tools)

    # -- calls --------------------------------------------------------------
    def _kwargs(
        self, messages: list[dict[str, Any]], tools: list[dict] | None, max_tokens: int | None
    ) -> dict:
        kw: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "timeout": self.request_timeout,
            "temperature": self.temperature,
            "num_retries": 0,
        }
        if max_tokens:
            kw["max_tokens"] = max_tokens
        if tools:
            kw["tools"] = tools
            kw["tool_choice"] = "auto"
        if self.api_base:
            kw["api_base"] = self.api_base
        if self.api_key:
            kw["api_key"] = self.api_key
        elif self.api_base and self.model.startswith("openai/"):
            # OpenAI-compatible local servers accept any key; litellm insists on one.
            kw["api_key"] = os.environ.get("OPENAI_API_KEY") or "sk-no-key-needed"
        return kw

    def _to_reply(self, resp: Any, messages: list[dict], tools: list[dict] | None, started: float) -> Reply:
        litellm = load_litellm()
        if not getattr(resp, "choices", None):
            raise ProviderError(f"{self.model} returned a reply with no choices")
        choice = resp.choices[0]
        msg = choice.message
        calls = []
        for i, tc in enumerate(getattr(msg, "tool_calls", None) or []):
            fn = tc.function
            calls.append(ToolCall(id=tc.id or f"call_{i}", name=fn.name or "", arguments=fn.arguments or ""))
        content = msg.content or ""
        usage = getattr(resp, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0) or self.estimate_prompt_tokens(
            messages, tools
        )
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0) or count_text(content)
        cost: float | None = None
        if not self.model.startswith("scripted/"):
            try:
                cost = float(litellm.completion_cost(completion_response=resp))
            except Exception:
                cost = None  # unknown price: reported as unknown, never as $0
            if cost == 0.0 and not self.priced():
                cost = None
        return Reply(
            content=content,
            tool_calls=calls,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost=cost,
            latency_s=time.monotonic() - started,
            model=self.model,
            finish_reason=getattr(choice, "finish_reason", None),
        )

    def priced(self) -> bool:
        """Whether litellm knows this model's price (else costs are unknown, never $0)."""
        if self.model.startswith("scripted/"):
            return False
        litellm = load_litellm()
        try:
            info = litellm.get_model_info(self.model)
            return bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))
        except Exception:
            return False

    def _delay(self, attempt: int) -> float:
        return min(30.0, self.retry_base_delay * (2**attempt)) * (0.5 + random.random() / 2)

    def _fail(self, exc: BaseException, kind: str) -> Exception:
        if kind == "config":
            return ConfigError(f"provider refused {self.model}: {_short(exc)}")
        return ProviderError(f"model call to {self.model} failed: {_short(exc)}")

    def _retry_delay(self, exc: Exception, attempt: int) -> float:
        """Seconds to wait before trying again, or the error to raise instead."""
        kind = _classify(exc)
        if kind != "retry" or attempt == self.retries:
            raise self._fail(exc, kind) from None
        return self._delay(attempt)

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None, max_tokens: int | None = None
    ) -> Reply:
        litellm = load_litellm()
        kw = self._kwargs(messages, tools, max_tokens)
        for attempt in range(self.retries + 1):
            started = time.monotonic()
            try:
                resp = litellm.completion(**kw)
            except Exception as exc:
                self._sleep(self._retry_delay(exc, attempt))
                continue
            return self._to_reply(resp, messages, tools, started)
        raise AssertionError("unreachable")

    async def acomplete(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None, max_tokens: int | None = None
    ) -> Reply:
        litellm = load_litellm()
        kw = self._kwargs(messages, tools, max_tokens)
        for attempt in range(self.retries + 1):
            started = time.monotonic()
            try:
                resp = await litellm.acompletion(**kw)
            except Exception as exc:
                await asyncio.sleep(self._retry_delay(exc, attempt))
                continue
            return self._to_reply(resp, messages, tools, started)
        raise AssertionError("unreachable")
