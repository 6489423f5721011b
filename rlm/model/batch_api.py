"""A provider's Batch API through litellm: one request file uploaded, one job made of it, its
state asked for, its results read back (`rlm ask --batch`, rlm.run.batch drives it).

The requests are the ones a plain sub-call sends (rlm.model.client: the same messages, reply cap
and temperature), one JSONL line each for the provider's `/v1/chat/completions`, so a batch's
answers are the fan-out's answers at about half the price. Only providers whose Batch API takes
such a file are offered: OpenAI (`openai/…`, or an OpenAI-compatible server given with
--api-base that has one) and a LiteLLM proxy (`litellm_proxy/…`), which speaks the same API for
whatever it fronts. Everything a provider sends back is data: the job's state and each result
line are checked for type before they are used.

Each request here is bounded by the client's request timeout and by the time the run has left,
and looks for a stop (Ctrl-C, SIGTERM) every STOP_POLL_S, as a model call does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm.errors import ConfigError, Interrupted, ProviderError, RlmError
from rlm.model.client import (
    STOP_POLL_S,
    InThread,
    ModelClient,
    Reply,
    failure_kind,
    load_litellm,
    provider_words,
)
from rlm.model.tokens import count_text

# The litellm providers whose Batch API takes a JSONL file of chat-completions requests.
BATCH_PROVIDERS = ("openai", "litellm_proxy")
ENDPOINT = "/v1/chat/completions"
WINDOW = "24h"
# A job's states that end it (the OpenAI Batch API's words; `cancelling` still goes on).
ENDED = ("completed", "failed", "expired", "cancelled")
# What an id from a provider or a trace may be: a plain token, never a path or a URL.
TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


@dataclass(frozen=True)
class BatchState:
    """A job as the provider last described it."""

    id: str
    status: str
    completed: int
    failed: int
    total: int
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: str = ""  # the provider's words about a job that failed

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(frozen=True)
class BatchLine:
    """One request's outcome in a job: its reply, or why it has none."""

    custom_id: str
    reply: Reply | None = None
    error: str | None = None


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BatchApi:
    """The Batch API of the provider `client` calls; ConfigError (exit 4) when it has none."""

    def __init__(self, client: ModelClient) -> None:
        self.client = client
        if client.router is not None:
            raise ConfigError(
                f"--batch sends a fan-out to one provider's Batch API; {client.model} is a group of "
                "deployments: give --sub-model one provider's model"
            )
        litellm = load_litellm()
        try:
            name, provider, key, base = litellm.get_llm_provider(model=client.model, api_base=client.api_base)
        except Exception:
            provider, name, key, base = "", client.model, None, None
        if provider not in BATCH_PROVIDERS:
            raise ConfigError(
                f"--batch needs a provider with a Batch API (OpenAI: openai/…, or a LiteLLM proxy: "
                f"litellm_proxy/…); the sub-model {client.model} has none: leave out --batch"
            )
        self.provider: str = provider
        self.model: str = str(name)  # as each request line names it: without the provider's prefix
        self.api_base: str | None = client.api_base or base
        if provider == "litellm_proxy" and not self.api_base:
            raise ConfigError(
                "--batch with litellm_proxy/… needs the proxy's URL: --api-base or LITELLM_PROXY_API_BASE"
            )
        api_key = client.api_key or key
        if api_key is None and client.api_base and provider == "openai":
            # OpenAI-compatible servers accept any key; litellm insists on one (as a model call does).
            api_key = os.environ.get("OPENAI_API_KEY") or "sk-no-key-needed"
        self.api_key: str | None = api_key

    @property
    def where(self) -> str:
        """What the job runs at, for messages: the server's URL, else the provider."""
        return self.api_base or self.provider

    # -- the request file ------------------------------------------------------------
    def request_line(self, custom_id: str, messages: list[dict[str, Any]], max_tokens: int | None) -> str:
        """One request as the provider's JSONL takes it: the body a plain sub-call sends."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.client.temperature,
        }
        if max_tokens:
            body["max_tokens"] = max_tokens
        line = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
        # Canonical: the same requests make the same file, byte for byte (a resumed run finds its job by its hash).
        return json.dumps(line, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def cost_bound(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The most requests of this size may cost at the batch price; None when it is unknown."""
        full = self.client.cost_bound(prompt_tokens, completion_tokens)
        return None if full is None else self._batch_cost(prompt_tokens, completion_tokens, full)

    # -- requests ----------------------------------------------------------------------
    def probe(self, seconds: float | None) -> None:
        """Ask the provider for its latest job: an endpoint without a Batch API (a plain vLLM or
        llama.cpp server) says so now, as exit 4, before the run sends anything."""
        litellm = load_litellm()
        self._call(
            "list the batches",
            lambda t: litellm.list_batches(limit=1, **self._params(t)),
            seconds,
            retry=True,
        )

    def submit(self, data: bytes, seconds: Callable[[], float | None]) -> tuple[str, BatchState]:
        """Upload the request file and make a job of it: (the file's id, the job's state)."""
        litellm = load_litellm()
        uploaded = self._call(
            "upload the request file",
            lambda t: litellm.create_file(
                file=("rlm-batch.jsonl", data, "application/jsonl"), purpose="batch", **self._params(t)
            ),
            seconds(),
            retry=True,
        )
        file_id = _token(getattr(uploaded, "id", None), "the uploaded file's id")
        # Not retried once sent: a job made by a request whose reply was lost would run twice.
        made = self._call(
            "create the batch",
            lambda t: litellm.create_batch(
                completion_window=WINDOW,
                endpoint=ENDPOINT,
                input_file_id=file_id,
                metadata={"made_by": "rlm"},
                **self._params(t),
            ),
            seconds(),
            retry=False,
        )
        return file_id, _state(made)

    def state(self, batch_id: str, seconds: float | None) -> BatchState:
        litellm = load_litellm()
        found = self._call(
            f"ask for batch {batch_id}",
            lambda t: litellm.retrieve_batch(batch_id=batch_id, **self._params(t)),
            seconds,
            retry=True,
        )
        state = _state(found)
        if state.id != batch_id:
            raise ProviderError(f"{self.where} answered for batch {state.id} when asked for {batch_id}")
        return state

    def results(
        self,
        state: BatchState,
        messages: dict[str, list[dict[str, Any]]],
        seconds: Callable[[], float | None],
    ) -> dict[str, BatchLine]:
        """Each request's outcome by its custom_id, from the job's output and error files;
        `messages` (by custom_id) are the requests', to estimate a usage a reply leaves out."""
        found: dict[str, BatchLine] = {}
        for file_id in (state.error_file_id, state.output_file_id):  # an answer wins over an error
            if not file_id:
                continue
            for raw in self._content(_token(file_id, "a result file's id"), seconds()).splitlines():
                line = self._line(raw, messages)
                if line is not None:
                    found[line.custom_id] = line
        return found

    # -- helpers -----------------------------------------------------------------------
    def _params(self, timeout: float) -> dict[str, Any]:
        params: dict[str, Any] = {
            "custom_llm_provider": self.provider,
            "timeout": timeout,
            "max_retries": 0,  # retried here, within the run's time, as model calls are
        }
        if self.api_base:
            params["api_base"] = self.api_base
        if self.api_key:
            params["api_key"] = self.api_key
        return params

    def _content(self, file_id: str, seconds: float | None) -> bytes:
        litellm = load_litellm()
        got = self._call(
            f"read the file {file_id}",
            lambda t: litellm.file_content(file_id=file_id, **self._params(t)),
            seconds,
            retry=True,
        )
        data = getattr(got, "content", got)
        if isinstance(data, str):
            return data.encode("utf-8")
        if not isinstance(data, bytes):
            raise ProviderError(f"{self.where} sent the file {file_id} as {type(data).__name__}, not bytes")
        return data

    def _line(self, raw: bytes, messages: dict[str, list[dict[str, Any]]]) -> BatchLine | None:
        """One line of a result file; None for a line that names none of this job's requests."""
        try:
            doc = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("custom_id"), str):
            return None
        custom_id = doc["custom_id"]
        if custom_id not in messages:
            return None
        response: dict[str, Any] = doc["response"] if isinstance(doc.get("response"), dict) else {}
        body: dict[str, Any] = response["body"] if isinstance(response.get("body"), dict) else {}
        status = response.get("status_code")
        error = doc.get("error") or body.get("error")
        if error or status != 200:
            words = error.get("message") if isinstance(error, dict) else error
            said = " ".join(str(words or "no reply").split())[:300]
            return BatchLine(custom_id, error=f"HTTP {status}: {said}" if isinstance(status, int) else said)
        try:
            return BatchLine(custom_id, reply=self._reply(body, messages[custom_id]))
        except (TypeError, ValueError, KeyError, IndexError):
            return BatchLine(custom_id, error="the batch's reply was not a chat completion")

    def _reply(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Reply:
        """A result line's chat completion as the client's Reply, usage from its body, priced at
        the batch rate (None when the model's price is unknown, never $0)."""
        choice = body["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content")
        usage: dict[str, Any] = body["usage"] if isinstance(body.get("usage"), dict) else {}
        prompt = _count(usage.get("prompt_tokens")) or self.client.estimate_prompt_tokens(messages)
        completion = _count(usage.get("completion_tokens")) or count_text(content)
        full = self.client.cost_bound(prompt, completion)
        finish = choice.get("finish_reason")
        return Reply(
            content=content,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost=None if full is None else self._batch_cost(prompt, completion, full),
            model=self.client.model,
            finish_reason=finish if isinstance(finish, str) else None,
        )

    def _batch_cost(self, prompt_tokens: int, completion_tokens: int, full: float) -> float:
        """litellm's batch price of these tokens (its `*_batches` prices, else half the price)."""
        litellm = load_litellm()
        try:
            from litellm.cost_calculator import batch_cost_calculator

            usage = litellm.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            p, c = batch_cost_calculator(usage=usage, model=self.model, custom_llm_provider=self.provider)
            if p or c:
                return float(p) + float(c)
        except Exception:  # noqa: BLE001 (a price litellm cannot work out: the documented half)
            pass
        return full / 2

    def _call(self, what: str, call: Callable[[float], Any], seconds: float | None, *, retry: bool) -> Any:
        """One request of the Batch API, retried as a model call is (a refusal of credentials or
        of the endpoint is ConfigError, exit 4; a provider that keeps failing, ProviderError)."""
        client = self.client
        for attempt in range(client.retries + 1):
            limit = (
                client.request_timeout if seconds is None else max(0.1, min(client.request_timeout, seconds))
            )
            try:
                return _bounded(functools.partial(call, limit), limit)
            except RlmError:
                raise
            except Exception as exc:  # noqa: BLE001 (litellm's and the HTTP client's, decided below)
                kind = failure_kind(exc)
                words = (
                    provider_words(exc)
                    if not isinstance(exc, TimeoutError)
                    else f"no reply within {limit:.0f} s"
                )
                if kind == "config":
                    raise ConfigError(f"{self.where} refused to {what} for {client.model}: {words}") from None
                if kind != "retry" or not retry or attempt >= client.retries:
                    raise ProviderError(f"{self.where} failed to {what}: {words}") from None
                pause(min(30.0, client.retry_base_delay * (2**attempt)))
        raise AssertionError("unreachable")


def _bounded(call: Callable[[], Any], limit: float) -> Any:
    """Run a blocking request for at most `limit` seconds, looking for a stop meanwhile: a
    signal reaches the main thread only, and a fan-out may wait in another."""
    running = InThread(call, "rlm-batch-request")
    ends = time.monotonic() + limit
    while not running.wait(max(0.0, min(STOP_POLL_S, ends - time.monotonic()))):
        if Interrupted.last is not None:
            raise Interrupted.again()
        if time.monotonic() >= ends:
            raise TimeoutError(f"no reply within {limit:.1f} s")
    return running.outcome()


def pause(seconds: float) -> None:
    """Wait, ended early by a stop (Ctrl-C, SIGTERM): a signal reaches the main thread only, and
    a fan-out may wait in another (a child investigation's)."""
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > 0:
        time.sleep(min(STOP_POLL_S, left))
        if Interrupted.last is not None:
            raise Interrupted.again()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _token(value: Any, what: str) -> str:
    if not isinstance(value, str) or not TOKEN.match(value):
        raise ProviderError(f"the provider sent {what} that is not a plain id: {str(value)[:60]!r}")
    return value


def _state(found: Any) -> BatchState:
    """A job's state from what litellm returned (the OpenAI SDK's Batch), its fields checked."""
    counts = getattr(found, "request_counts", None)
    status = getattr(found, "status", None)
    errors = getattr(found, "errors", None)
    said = ""
    for err in getattr(errors, "data", None) or []:
        message = getattr(err, "message", None)
        if isinstance(message, str):
            said = " ".join(message.split())[:300]
            break
    output, failed_file = getattr(found, "output_file_id", None), getattr(found, "error_file_id", None)
    return BatchState(
        id=_token(getattr(found, "id", None), "a batch id"),
        status=status if isinstance(status, str) and status.isidentifier() else "unknown",
        completed=_count(getattr(counts, "completed", 0)),
        failed=_count(getattr(counts, "failed", 0)),
        total=_count(getattr(counts, "total", 0)),
        output_file_id=_token(output, "a result file's id") if output else None,
        error_file_id=_token(failed_file, "an error file's id") if failed_file else None,
        errors=said,
    )
