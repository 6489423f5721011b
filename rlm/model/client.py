"""Model calls: the only module that imports litellm, and only when a call is made.

litellm's import takes seconds (5-6 s on two cores, litellm 1.106) and has side
effects, so it is imported lazily with its pitfalls handled first: a local cost
map (no fetch), production mode (no `.env` loading), offline tiktoken, no debug
banner on stdout.

Over 400 lines: retries, Retry-After, the wall-clock bound of each call and the one
failure decision per provider are one policy, applied to sync and async calls alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import gc
import hashlib
import itertools
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlm.errors import ConfigError, Interrupted, ProviderError, RlmError
from rlm.model.budget import Budget, BudgetExceeded
from rlm.model.deployments import Deployment, answered_by, cooling_down_s
from rlm.model.events import ProviderEvent, ProviderEvents, ProviderFailed, Retry, Waiting
from rlm.model.tokens import count_messages, count_text, count_tools, ensure_offline_tiktoken

_lock = threading.Lock()
_litellm_module: Any = None
# Set once litellm's import in the background (load_litellm_in_background) has ended: what a
# run with a time limit waits on, for no longer than the limit leaves (await_litellm).
_import_ended: threading.Event | None = None


def litellm_environment() -> None:
    """The variables litellm and tiktoken must find: the local cost map, production mode, the
    bundled encodings. Set before the import, and again by a warm process's child (its
    environment, the client's, replaces the one they were set in)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ["LITELLM_MODE"] = "PRODUCTION"
    ensure_offline_tiktoken()


def load_litellm() -> Any:
    """Import litellm once, configured for offline, quiet, production use."""
    global _litellm_module
    with _lock:
        if _litellm_module is None:
            litellm_environment()
            # The import builds thousands of classes (pydantic models, mostly) that live as long as
            # the process: the cyclic collector's passes over them meanwhile find nothing to free and
            # cost ~0.9 s of its ~5 s of CPU. Off for the import, and what it built frozen after, so
            # that later collections skip it too.
            collecting = gc.isenabled()
            gc.disable()
            try:
                import litellm
            finally:
                gc.freeze()
                if collecting:
                    gc.enable()

            litellm.suppress_debug_info = True
            litellm.drop_params = True
            litellm.telemetry = False
            from rlm.model.scripted import register_scripted_provider

            register_scripted_provider(litellm)
            _litellm_module = litellm
    return _litellm_module


def load_litellm_in_background() -> threading.Event:
    """Start litellm's import, and the OpenAI SDK's modules its first call imports (import_ahead:
    seconds of CPU, all of it holding the GIL), in a thread of its own, so that it overlaps the
    input's profile; the first load_litellm() waits for it on the lock, or finds it done. A
    failed import here is raised again, in the caller's thread, by that load_litellm().

    Returns an event set once the import has ended, done or failed: a big input's table build
    waits for it, so that the model's first request does not wait for cores the build holds."""
    global _import_ended
    ended = threading.Event()
    if _litellm_module is not None:
        ended.set()
        return ended
    if _import_ended is not None:  # one under way already
        return _import_ended
    _import_ended = ended

    def load() -> None:
        with contextlib.suppress(BaseException):
            import_ahead()
        ended.set()

    threading.Thread(target=load, name="rlm-litellm-import", daemon=True).start()
    return ended


def await_litellm(deadline: float | None, limit_s: float | None) -> None:
    """Wait for litellm's import under way in the background until `deadline` (time.monotonic())
    at most: on a cold or busy machine it has taken over ten seconds, and a thread cannot be
    stopped mid-import, so a run with --max-time gives up waiting instead (BudgetExceeded; the
    import goes on in its daemon thread, which does not hold the process's exit). Without an
    import under way, or a deadline, there is nothing to bound here: load_litellm imports."""
    ended = _import_ended
    if deadline is None or ended is None or ended.wait(max(0.0, deadline - time.monotonic())):
        return
    raise BudgetExceeded(
        "time", f"the time limit of {limit_s:g} s was reached (while loading the model client)"
    )


def import_ahead() -> None:
    """Import litellm and what its first call to an OpenAI-compatible server imports (the
    OpenAI SDK's resource modules, ~0.9 s of the first call's 1.2 s), without making a call:
    a call leaves litellm's logging thread running, and the warm process that asks for this
    forks, which no thread may be running for (rlm.cli.warm_server)."""
    load_litellm()
    import h11  # noqa: F401  (the HTTP/1.1 parser httpx's transport imports on the first request)
    import httpcore._sync.connection_pool  # noqa: F401
    import openai

    sdk = openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:1/v1")
    for resource in ("chat", "completions", "embeddings", "responses"):
        getattr(sdk, resource, None)
    sdk.close()


@dataclass(frozen=True)
class OwnProvider:
    """A provider rlm registers in litellm itself: what litellm cannot be asked about it."""

    name: str
    tools: bool  # speaks native tool calls
    priced: bool  # litellm has a price for it
    needs_credentials: bool
    measured_usage: bool  # its token counts come from the model's own tokenizer


# The scripted provider (rlm.model.scripted) plays recorded or scripted replies.
OWN_PROVIDERS: dict[str, OwnProvider] = {
    "scripted": OwnProvider(
        "scripted", tools=True, priced=False, needs_credentials=False, measured_usage=False
    )
}


def own_provider(model: str) -> OwnProvider | None:
    """The provider of `model` when rlm registered it itself, else None (a litellm provider)."""
    prefix, sep, _ = model.partition("/")
    return OWN_PROVIDERS.get(prefix) if sep else None


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
    deployment: str | None = None  # the deployment of a group that answered (rlm.model.deployments)

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
# A provider that asks to be left alone longer than this is treated as down.
RETRY_AFTER_MAX_S = 120.0
# A reply slower than this is announced on stderr (and again at twice, four times … as long).
WAIT_NOTICE_S = 5.0
# How often a model call waited on outside the main thread looks for a stop (Ctrl-C, SIGTERM).
STOP_POLL_S = 0.1
# A refused connection is tried once more (a server restarting), not `retries` times.
REFUSED_RETRIES = 1

# Where each call's outcome goes when the run records its model calls (rlm.run.cassette).
Recorder = Callable[[dict[str, Any]], None]


def request_key(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, max_tokens: int | None
) -> str:
    """A stable name for one request: the sha256 of its messages, tools and reply cap as
    canonical JSON. The same request made again, by this run or a re-run, has the same key."""
    canonical = json.dumps(
        {"messages": messages, "tools": tools or None, "max_tokens": max_tokens},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class _Timeout(Exception):
    """No complete reply in the time allowed: the request timeout, or the time the run has left."""

    def __init__(self, seconds: float, by_deadline: bool) -> None:
        super().__init__(f"no complete reply within {seconds:.1f} s")
        self.seconds = seconds
        self.by_deadline = by_deadline


class _FallBack(Exception):
    """A group of deployments has used its attempts: the call goes on to the next group."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


class InThread:
    """A blocking call run in a daemon thread, its outcome handed to the thread that waits for
    it: a wait can then give up (its time is up; the call's socket times out on its own) or end
    at a stop, which a signal delivers to the main thread only."""

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self._box: dict[str, Any] = {}
        self._done = threading.Event()
        self._call = call
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        try:
            self._box["value"] = self._call()
        except BaseException as exc:  # handed to the waiting thread
            self._box["error"] = exc
        finally:
            self._done.set()

    def wait(self, seconds: float) -> bool:
        """Whether the call ended within `seconds`."""
        return self._done.wait(seconds)

    def outcome(self) -> Any:
        """What the ended call returned; what it raised is raised here."""
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


class _NoChoices(Exception):
    """A reply without choices: retried like any other malformed reply."""


def failure_kind(exc: BaseException) -> str:
    """'config', 'retry' or 'fatal' for a litellm exception."""
    if isinstance(exc, _Timeout | _NoChoices):
        return "retry"
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
    if cooling_down_s(exc) is not None:  # every deployment of a group cools down: wait, then ask again
        return "retry"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status == 429 or status >= 500):
        return "retry"
    return "fatal"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 12:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _refused(exc: BaseException) -> bool:
    """Whether nothing listens where the request went (as opposed to a server that failed)."""
    for e in _chain(exc):
        if isinstance(e, ConnectionRefusedError):
            return True
        text = str(e).lower()
        if "connection refused" in text or "all connection attempts failed" in text:
            return True
    return False


# What litellm's Router appends to a deployment's error: rlm says itself what it does next.
_ROUTER_NOTE = re.compile(r"\s*LiteLLM: model group '[^']*' failed with the error above\.[^.]*\.")
_LIB_PREFIX = re.compile(r"^(?:litellm\.)?\w+(?:Error|Exception)(?::|\s+-)\s*")


def _clean(exc: BaseException) -> str:
    """The provider's own words, without litellm's repeated class names."""
    text = _ROUTER_NOTE.sub("", " ".join(str(exc).split()))
    while (shorter := _LIB_PREFIX.sub("", text, count=1)) != text:
        text = shorter
    return text[:300] or type(exc).__name__


def provider_words(exc: BaseException) -> str:
    """A litellm exception in the provider's own words, one line (HTTP status first when it has one)."""
    status = getattr(exc, "status_code", None)
    text = _clean(exc)
    return f"HTTP {status}: {text}" if isinstance(status, int) and status >= 400 else text


def _unknown_model(model: str) -> str:
    return (
        f"unknown model {model!r}: write it as provider/model (e.g. openai/gpt-4o-mini), or use "
        "-m openai/NAME --api-base URL for an OpenAI-compatible server"
    )


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait (Retry-After / retry-after-ms), if it said."""
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return max(0.0, float(ms) / 1000)
            value = headers.get("retry-after")
        except (AttributeError, TypeError, ValueError):
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                continue
            return max(0.0, when.timestamp() - time.time())
    return None


def _ignore(event: ProviderEvent) -> None:
    """Where a client not attached to a run sends its events: nowhere."""


class ModelClient:
    """A litellm model with retries, usage accounting and offline token counts.

    Every call is bounded as a whole (not per read) by the request timeout and
    by the time the run has left; retries follow one policy for sync and async
    calls (`_after_failure`): Retry-After is honoured, each retry is announced
    through `events`, and once a provider has failed after its retries the run
    does not wait on it again. (A retry library was weighed: the policy is one
    function either way, and the deadline and the shared failure decision are
    the parts a library does not know.)
    """

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
        small: bool = False,
        router: Any = None,
        deployments: Sequence[Deployment] = (),
        fallbacks: Sequence[tuple[str, Sequence[Deployment]]] = (),
    ) -> None:
        self.model = model
        # A group of deployments (rlm.model.deployments): calls go through litellm's Router, which
        # picks one; what litellm is asked about the model (window, price, tools) is asked of the
        # group's first deployment.
        self.router = router
        self.deployments = tuple(deployments)
        # The groups a call goes on to, in order, once this group has used its attempts.
        self.fallbacks = tuple((group, tuple(ds)) for group, ds in fallbacks)
        first = self.deployments[0].params if self.deployments else {}
        self._probe = str(first.get("model") or model)
        self._probe_base = first.get("api_base") if self.deployments else api_base
        # The offline model: small, served by llama.cpp, whose server holds a reply to a JSON
        # schema by a grammar (rlm.run.typed chooses its protocol by this).
        self.small = small
        self.own = own_provider(model)
        self.api_base = api_base
        self.api_key = api_key
        self.request_timeout = request_timeout
        self.retries = retries
        self.retry_base_delay = retry_base_delay
        self.temperature = temperature
        self._context_window = context_window
        self._sleep = sleep
        self.budget: Budget | None = None
        self._events: ProviderEvents = _ignore
        self._failed: dict[str, ProviderError] = {}
        # Which client of the run this is ("root" or "sub"), and where each call's outcome is
        # recorded when the run keeps its model calls (a trace's cassette); None: not kept.
        self.role = "root"
        self.recorder: Recorder | None = None

    def attach(
        self, budget: Budget, events: ProviderEvents | None = None, failed: dict[str, Any] | None = None
    ) -> None:
        """Bind the client to a run: its clock and cost limit, where to report, and the run's
        failure decisions (shared by the clients of one run, keyed by provider)."""
        self.budget = budget
        if events is not None:
            self._events = events
        if failed is not None:
            self._failed = failed

    @property
    def measures_usage(self) -> bool:
        """Whether reported token counts are the model's own (scripted ones are estimates)."""
        return self.own is None or self.own.measured_usage

    @property
    def all_deployments(self) -> tuple[Deployment, ...]:
        """The group's deployments and those of the groups it falls back to."""
        return self.deployments + tuple(d for _, ds in self.fallbacks for d in ds)

    def _groups(self) -> list[tuple[str, tuple[Deployment, ...]]]:
        """Where a call goes, in order: this client's model (a group, or one model), then its fallbacks."""
        return [(self.model, self.deployments), *self.fallbacks]

    @property
    def where(self) -> str:
        """What a call waits on, for messages: the server's URL, else the model."""
        if self.router is not None:
            return f"the deployments of {self.model}"
        return self.api_base or self.model

    # -- capabilities -------------------------------------------------------
    def supports_tools(self) -> bool:
        """Native tool calling, as litellm knows it. A custom api_base is assumed not to."""
        if self.own is not None:
            return self.own.tools
        if self._probe_base:
            return False
        litellm = load_litellm()
        try:
            return bool(litellm.supports_function_calling(model=self._probe))
        except Exception:
            return False

    def context_window(self) -> int:
        if self._context_window:
            return self._context_window
        if self.own is None:
            litellm = load_litellm()
            try:
                info = litellm.get_model_info(self._probe)
                window = info.get("max_input_tokens") or info.get("max_tokens")
                if window:
                    self._context_window = int(window)
                    return self._context_window
            except Exception:
                pass
        self._context_window = 32_000
        return self._context_window

    def check_credentials(self) -> None:
        """Fail early: an unknown model (exit 5, as a call would), a missing key (exit 4)."""
        if self.own is not None and not self.own.needs_credentials:
            return
        litellm = load_litellm()
        if self.router is not None:
            # Each deployment's keys were checked with the model list (rlm.model.deployments).
            for d in self.deployments:
                try:
                    litellm.get_llm_provider(model=d.model)
                except Exception:
                    raise ProviderError(f"deployment {d.id}: " + _unknown_model(d.model)) from None
            return
        if not self.api_base:
            try:
                litellm.get_llm_provider(model=self.model)
            except Exception:
                raise ProviderError(_unknown_model(self.model)) from None
        if self.api_base or self.api_key:
            return
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

    def estimate_prompt_tokens(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        return count_messages(messages) + count_tools(tools)

    def priced(self) -> bool:
        """Whether litellm knows this model's price (else costs are unknown, never $0)."""
        if self.own is not None:
            return self.own.priced
        litellm = load_litellm()
        try:
            info = litellm.get_model_info(self._probe)
            return bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))
        except Exception:
            return False

    def cost_bound(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The most a call of this size may cost, or None when the price is unknown."""
        if not self.priced():
            return None
        litellm = load_litellm()
        try:
            p, c = litellm.cost_per_token(
                model=self._probe, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
            return float(p) + float(c)
        except Exception:
            return None

    # -- calls --------------------------------------------------------------
    def _kwargs(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
        json_reply: bool = False,
        schema: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "timeout": self.request_timeout,
            "temperature": self.temperature,
            "num_retries": 0,
            # litellm (1.81+) imports its MCP gateway and the `mcp` SDK at the first call that
            # passes tools=, to look for MCP-server tools, which rlm never sends: about 1 s of
            # CPU per process, a sixth of a short run's. This flag of litellm's skips the look.
            "_skip_mcp_handler": True,
        }
        if max_tokens:
            kw["max_tokens"] = max_tokens
        if tools:
            kw["tools"] = tools
            kw["tool_choice"] = "auto"
        if schema is not None and self.own is None:
            # Structured output: llama.cpp's server turns the schema into a grammar the reply cannot
            # leave; OpenAI-style providers hold it too. The caller checks the reply either way.
            kw["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "action", "schema": schema, "strict": True},
            }
        elif json_reply and self.own is None:
            # JSON mode where the provider has it (OpenAI, llama.cpp's server, ...); litellm drops
            # the parameter for those that do not, and the caller parses tolerantly either way.
            kw["response_format"] = {"type": "json_object"}
        if self.router is not None:
            return kw  # each deployment has its own endpoint and key
        if self.api_base:
            kw["api_base"] = self.api_base
        if self.api_key:
            kw["api_key"] = self.api_key
        elif self.api_base and self.model.startswith("openai/"):
            # OpenAI-compatible local servers accept any key; litellm insists on one.
            kw["api_key"] = os.environ.get("OPENAI_API_KEY") or "sk-no-key-needed"
        return kw

    def _to_reply(
        self, resp: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, started: float
    ) -> Reply:
        litellm = load_litellm()
        if not getattr(resp, "choices", None):
            raise _NoChoices("the reply had no choices")
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
        if self.own is None or self.own.priced:
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
            deployment=answered_by(resp) if self.router is not None else None,
        )

    def _before(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        max_tokens: int | None,
        final: bool,
    ) -> None:
        """Refuse a call to a provider this run has given up on, or one that may cost too much."""
        failed = self._failed.get(self.where)
        if failed is not None:
            raise ProviderError(failed.message)
        if self.budget is not None and self.budget.max_cost is not None:
            bound = self.cost_bound(self.estimate_prompt_tokens(messages, tools), max_tokens or 2048)
            self.budget.check_cost(bound, final)

    def _time_up(self, final: bool, note: str) -> BudgetExceeded:
        assert self.budget is not None
        if final:  # the answer's own deadline: synthesis falls back to what is known
            return BudgetExceeded(
                "time", f"the time limit of {self.budget.max_time:g} s was reached ({note})"
            )
        return self.budget.out_of_time(note)

    def _limit(self, final: bool) -> tuple[float, bool]:
        """Seconds this attempt may take, and whether the run's time limit is what bounds it."""
        left = None if self.budget is None else self.budget.time_left(final)
        if left is None or left >= self.request_timeout:
            return self.request_timeout, False
        if left <= 0.05:
            raise self._time_up(final, f"before a call to {self.where}")
        return left, True

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, _Timeout | _NoChoices):
            return str(exc)
        cooling = cooling_down_s(exc)
        if cooling is not None:
            return f"every deployment of {self.model} failed and is left alone for {cooling:g} s"
        if _refused(exc):
            return f"nothing answers at {self.where}"
        chain = _chain(exc)
        bad_json = next((e for e in chain if isinstance(e, json.JSONDecodeError)), None)
        if bad_json is not None:
            return f"the reply was not valid JSON ({bad_json})"
        text = _clean(exc)
        if text.lower().startswith("connection error"):
            root = next((e for e in reversed(chain) if str(e).strip()), exc)
            return f"the connection failed ({_clean(root)})"
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and status >= 400:
            return f"HTTP {status}: {text}"
        return text

    def _give_up(self, exc: BaseException, attempts: int, note: str = "") -> ProviderError:
        """The run's one failure decision about this provider."""
        if _refused(exc) and self.api_base:
            message = f"nothing answers at {self.api_base}: is the server running? (model {self.model})"
        else:
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            message = f"model call to {self.model} failed{tries}: {self._reason(exc)}{note}"
        err = ProviderError(message)
        self._failed[self.where] = err
        self._events(ProviderFailed(model=self.model, where=self.where, message=message))
        return err

    def _after_failure(
        self,
        exc: Exception,
        attempt: int,
        final: bool,
        group: tuple[str, tuple[Deployment, ...]] | None = None,
        fallback: str | None = None,
    ) -> float:
        """Seconds to wait before attempt `attempt + 1`, or the exception that ends the call
        (_FallBack when the group has used its attempts and `fallback`, the next group, remains)."""
        deployments = group[1] if group is not None else self.deployments
        if isinstance(exc, RlmError | BudgetExceeded):
            raise exc
        if self.budget is not None:
            self.budget.note_failed_request()
        if isinstance(exc, _Timeout) and exc.by_deadline:
            raise self._time_up(final, f"while waiting for {self.where}") from None
        kind = failure_kind(exc)
        if kind == "config":
            raise ConfigError(
                f"{self.where} refused the request for {self.model}: {self._reason(exc)}"
            ) from None
        if kind == "fatal":
            if "llm provider not provided" in str(exc).lower():
                raise ProviderError(_unknown_model(self.model)) from None
            raise ProviderError(f"model call to {self.model} failed: {self._reason(exc)}") from None
        if self._failed.get(self.where) is not None:  # another call gave up on it meanwhile
            raise ProviderError(self._failed[self.where].message) from None
        if self.router is not None:
            # Each deployment of a group may fail once (the next is asked at once) before the
            # retries proper, which wait for one to be free again.
            limit = self.retries + len(deployments) - 1
        else:
            limit = min(self.retries, REFUSED_RETRIES) if _refused(exc) else self.retries
        if attempt >= limit:
            if fallback is not None:
                raise _FallBack(self._reason(exc), attempt + 1) from None
            raise self._give_up(exc, attempt + 1) from None
        cooling = cooling_down_s(exc)
        asked = cooling if cooling is not None else _retry_after(exc)
        if cooling is None and len(deployments) > 1:
            # One deployment failed and cools down: the Router sends the next attempt to another,
            # at once. Only when all of them cool down is there anything to wait for (`cooling`).
            asked = 0.0
        if asked is not None and asked > RETRY_AFTER_MAX_S:
            if fallback is not None:
                raise _FallBack(f"{self._reason(exc)} (it asks to wait {asked:g} s)", attempt + 1) from None
            raise self._give_up(exc, attempt + 1, f" (it asks to wait {asked:g} s)") from None
        if asked is not None:
            delay = asked
        else:
            delay = min(30.0, self.retry_base_delay * (2**attempt)) * (0.5 + random.random() / 2)
        left = None if self.budget is None else self.budget.time_left(final)
        if left is not None and delay >= left:
            why = f"{self.where} asked to wait {asked:g} s" if asked is not None else f"{self._reason(exc)}"
            raise self._time_up(final, why) from None
        self._events(
            Retry(
                model=self.model,
                where=self.where,
                attempt=attempt + 2,
                attempts=limit + 1,
                error=self._reason(exc),
                wait_s=round(delay, 3),
                retry_after=asked,
            )
        )
        return delay

    def _fell_back(self, group: str, to: str | None, moved: _FallBack) -> None:
        """Said as a retry: the call goes on to the next group at once, with attempts of its own."""
        deployments = dict(self._groups()).get(to or "", ())
        self._events(
            Retry(
                model=self.model,
                where=f"the deployments of {group}",
                attempt=1,
                attempts=self.retries + max(1, len(deployments)),
                error=f"falling back to {to} after {moved.attempts} attempts ({moved.reason})",
                wait_s=0.0,
                retry_after=None,
            )
        )

    def _record(
        self,
        request: tuple[list[dict[str, Any]], list[dict[str, Any]] | None, int | None],
        reply: Reply | None = None,
        error: Exception | None = None,
        batch: str | None = None,
    ) -> None:
        """Hand the outcome of one call to the recorder: the reply as returned, with its usage,
        or the error that ended the call (a provider given up on, a refusal, a limit reached);
        `batch`: the provider's batch job the reply came from (rlm.model.batch_api)."""
        if self.recorder is None:
            return
        entry: dict[str, Any] = {"role": self.role, "key": request_key(*request)}
        if reply is not None:
            entry.update(
                reply=reply.to_dict(),
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cost=reply.cost,
            )
            if reply.deployment is not None:
                entry["deployment"] = reply.deployment
            if batch is not None:
                entry["batch"] = batch
        elif isinstance(error, BudgetExceeded):
            entry.update(
                error=error.detail,
                error_kind="budget",
                limit=error.limit,
                stopped=self.budget is not None and self.budget.stopped is error,
            )
        elif isinstance(error, ProviderError | ConfigError):
            entry.update(
                error=error.message,
                error_kind="config" if isinstance(error, ConfigError) else "provider",
                gave_up=self._failed.get(self.where) is error,
            )
        else:
            return
        self.recorder(entry)

    def record_elsewhere(
        self, messages: list[dict[str, Any]], max_tokens: int | None, reply: Reply, batch: str | None = None
    ) -> None:
        """Record a call this client's spec made elsewhere, as if here: on another machine
        (rlm.run.executor), or as a line of the provider's batch job `batch` (rlm.run.batch)."""
        self._record((messages, None, max_tokens), reply=reply, batch=batch)

    def give_up(self, message: str) -> ProviderError:
        """The run's one failure decision about this provider, taken outside a call (a batch job
        that failed, rlm.run.batch): later calls to it fail at once, as after a call's retries."""
        err = ProviderError(message)
        self._failed[self.where] = err
        self._events(ProviderFailed(model=self.model, where=self.where, message=message))
        return err

    def _bounded(self, call: Callable[[], Any], limit: float, by_deadline: bool) -> Any:
        """Run a blocking call for at most `limit` seconds in all (a dripped reply included).

        The call runs in a daemon thread: when the time is up it is abandoned (its socket
        times out on its own) and the run goes on; Ctrl-C interrupts the wait at once. A
        signal reaches the main thread only: a wait in another thread (a child investigation
        of a fan-out) looks for the stop every STOP_POLL_S and ends with it, or the stop
        would wait for the child's reply.
        """
        running = InThread(call, "rlm-model-call")
        started = time.monotonic()
        notice = WAIT_NOTICE_S
        while True:
            waited = time.monotonic() - started
            if running.wait(max(0.0, min(limit, notice, waited + STOP_POLL_S) - waited)):
                break
            if Interrupted.last is not None:
                raise Interrupted.again()
            waited = time.monotonic() - started
            if waited >= limit:
                raise _Timeout(limit, by_deadline)
            if waited >= notice:
                self._events(
                    Waiting(model=self.model, where=self.where, waited_s=round(waited), limit_s=limit)
                )
                notice *= 2  # 5, 10, 20, 40 … s: a long wait is told, not narrated
        return running.outcome()

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        *,
        final: bool = False,
        json_reply: bool = False,
        schema: dict[str, Any] | None = None,
    ) -> Reply:
        """One model reply. final=True: the run's answer, which may use the time kept for it;
        json_reply=True: ask for one JSON object (JSON mode where the provider supports it);
        schema: a JSON schema the reply is held to where the provider takes one."""
        litellm = load_litellm()
        kw = self._kwargs(messages, tools, max_tokens, json_reply, schema)
        self._before(messages, tools, max_tokens, final)
        request = (messages, tools, max_tokens)
        groups = self._groups()
        try:
            for at, group in enumerate(groups):
                fallback = groups[at + 1][0] if at + 1 < len(groups) else None
                try:
                    for attempt in itertools.count():
                        limit, by_deadline = self._limit(final)
                        started = time.monotonic()
                        try:
                            via = self.router if self.router is not None else litellm
                            call = functools.partial(
                                via.completion, **{**kw, "model": group[0], "timeout": limit}
                            )
                            resp = self._bounded(call, limit, by_deadline)
                            reply = self._to_reply(resp, messages, tools, started)
                        except Exception as exc:
                            self._sleep(self._after_failure(exc, attempt, final, group, fallback))
                            continue
                        self._record(request, reply=reply)
                        return reply
                except _FallBack as moved:
                    self._fell_back(group[0], fallback, moved)
        except (RlmError, BudgetExceeded) as exc:
            self._record(request, error=exc)
            raise
        raise AssertionError("unreachable")

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        *,
        final: bool = False,
    ) -> Reply:
        litellm = load_litellm()
        kw = self._kwargs(messages, tools, max_tokens)
        self._before(messages, tools, max_tokens, final)
        request = (messages, tools, max_tokens)
        groups = self._groups()
        try:
            for at, group in enumerate(groups):
                fallback = groups[at + 1][0] if at + 1 < len(groups) else None
                try:
                    for attempt in itertools.count():
                        limit, by_deadline = self._limit(final)
                        started = time.monotonic()
                        try:
                            via = self.router if self.router is not None else litellm
                            try:
                                asked = via.acompletion(**{**kw, "model": group[0], "timeout": limit})
                                resp = await asyncio.wait_for(asked, limit)
                            except TimeoutError:
                                raise _Timeout(limit, by_deadline) from None
                            reply = self._to_reply(resp, messages, tools, started)
                        except Exception as exc:
                            await asyncio.sleep(self._after_failure(exc, attempt, final, group, fallback))
                            continue
                        self._record(request, reply=reply)
                        return reply
                except _FallBack as moved:
                    self._fell_back(group[0], fallback, moved)
        except (RlmError, BudgetExceeded) as exc:
            self._record(request, error=exc)
            raise
        raise AssertionError("unreachable")
