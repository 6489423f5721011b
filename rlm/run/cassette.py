"""A run's model calls as a cassette: recorded at the model-client boundary, served back by request.

Recording (`record_calls`): every call a ModelClient makes — root turns, sub-calls, child
investigations, syntheses and the widened second pass alike — reaches the trace through
the client's recorder hook (rlm.model.client) as the request's key (its client's role,
"root" or "sub", and a hash of the messages, tools and reply cap) and the reply as the
client returned it (content, tool calls, usage), or the error that ended the call. The
trace also keeps what shapes the prompts of each client: its context window, whether it
speaks native tool calls, whether its price is known.

Replay (`Cassette`, for `rlm replay --rerun`): model clients that serve each request from
the recording by its key, knowing nothing of the order the engine makes its calls in. A
request no recording has (its prompt changed because the code did) is served the next
unplayed recording of the same role, in recorded order, and that is reported; a request
with nothing left to play is a provider error, reported too, as is every recording left
unplayed. A cassette is data read from a trace: its numbers are checked before they size
a prompt or charge the budget.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from rlm.errors import ConfigError, ProviderError, RlmError
from rlm.model.budget import BudgetExceeded
from rlm.model.client import ModelClient, Reply, ToolCall, load_litellm, request_key
from rlm.model.events import ProviderFailed
from rlm.trace.redact import url_without_secrets
from rlm.trace.schema import CassetteCallRecord, CassetteClientRecord
from rlm.trace.writer import TraceWriter

ROLES = ("root", "sub")
DEFAULT_WINDOW = 32_000
_WINDOW_RANGE = (1_000, 100_000_000)


def record_calls(trace: TraceWriter, root: ModelClient, sub: ModelClient) -> None:
    """Keep every model call of the run in the trace's cassette, with what a re-run must
    know of each client. One client serving both roles is recorded once, as the root."""
    if sub is not root:
        sub.role = "sub"
    if trace.path is None:
        return  # no trace: nothing to keep, and no request to hash
    for client in {id(root): root, id(sub): sub}.values():
        facts: CassetteClientRecord = {
            "model": client.model,
            "where": url_without_secrets(client.where) or "",
            "context_window": client.context_window(),
            "tools": client.supports_tools(),
            "small": client.small,
            "priced": client.priced(),
            "measures_usage": client.measures_usage,
        }
        trace.add_model_client(client.role, facts)
        client.recorder = lambda call: trace.add_model_call(cast(CassetteCallRecord, call))


@dataclass
class Playback:
    """How the cassette served a re-run: each counted per call, the exceptions listed."""

    recorded: int = 0
    by_key: int = 0
    # Requests whose prompt had no recording, served in recorded order: {role, position}.
    by_order: list[dict[str, Any]] = field(default_factory=list)
    # Requests with no recording left to play: {role, asked} (the how-many-th call of its role).
    unanswered: list[dict[str, Any]] = field(default_factory=list)
    # Recordings no request played: {role, position}.
    unplayed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def same_calls(self) -> bool:
        """Whether the re-run made the calls the run made (by key or, prompts changed, by order)."""
        return not self.unanswered and not self.unplayed

    def to_dict(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "by_key": self.by_key,
            "by_order": self.by_order,
            "unanswered": self.unanswered,
            "unplayed": self.unplayed,
        }


class Cassette:
    """The recorded calls of one trace, played back to the clients `models()` yields."""

    def __init__(self, record: dict[str, Any], label: str) -> None:
        clients = record.get("clients") if isinstance(record.get("clients"), dict) else {}
        self.clients: dict[str, dict[str, Any]] = {
            role: facts
            for role, facts in (clients or {}).items()
            if role in ROLES and isinstance(facts, dict)
        }
        self.label = label
        self._calls: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
        for call in record.get("calls") or []:
            if isinstance(call, dict) and call.get("role") in ROLES and isinstance(call.get("key"), str):
                self._calls[call["role"]].append(call)
        self._played: dict[str, list[bool]] = {role: [False] * len(c) for role, c in self._calls.items()}
        self._by_key: dict[tuple[str, str], deque[int]] = {}
        for role, calls in self._calls.items():
            for i, call in enumerate(calls):
                self._by_key.setdefault((role, call["key"]), deque()).append(i)
        self._next = dict.fromkeys(ROLES, 0)  # the first recording of each role not yet played
        self._asked = dict.fromkeys(ROLES, 0)
        self._lock = threading.Lock()
        self.playback = Playback(recorded=sum(len(c) for c in self._calls.values()))

    @classmethod
    def of(cls, doc: dict[str, Any], label: str) -> Cassette | None:
        """The trace's cassette; None for a trace written before rlm recorded its model calls."""
        record = doc.get("cassette")
        if not isinstance(record, dict) or not isinstance(record.get("clients"), dict):
            return None
        cassette = cls(record, label)
        return cassette if "root" in cassette.clients else None

    def play(self, role: str, key: str) -> dict[str, Any] | None:
        """The recording that answers this request: the first unplayed one with its key, else
        the next unplayed one of its role (reported); None when none is left."""
        with self._lock:
            self._asked[role] += 1
            played = self._played[role]
            waiting = self._by_key.get((role, key))
            while waiting:
                i = waiting.popleft()
                if not played[i]:
                    played[i] = True
                    self.playback.by_key += 1
                    return self._calls[role][i]
            while self._next[role] < len(played) and played[self._next[role]]:
                self._next[role] += 1
            i = self._next[role]
            if i >= len(played):
                self.playback.unanswered.append({"role": role, "asked": self._asked[role]})
                return None
            played[i] = True
            self.playback.by_order.append({"role": role, "position": i + 1})
            return self._calls[role][i]

    def finish(self) -> Playback:
        """The playback, with the recordings no request played."""
        with self._lock:
            self.playback.unplayed = [
                {"role": role, "position": i + 1}
                for role in ROLES
                for i, done in enumerate(self._played[role])
                if not done
            ]
            return self.playback

    def model_name(self, role: str) -> str:
        """What the re-run's trace names the client of `role`: replies played from the trace."""
        return f"scripted/{self.label}#{role}"

    @contextlib.contextmanager
    def models(self) -> Iterator[tuple[ModelClient, ModelClient]]:
        """The root and sub-model clients of the re-run (one client when the run had one)."""
        root = CassetteClient(self, "root")
        sub = CassetteClient(self, "sub") if "sub" in self.clients else root
        yield root, sub


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _cost(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < float("inf")
    return float(value) if ok else None


class CassetteClient(ModelClient):
    """A model client whose replies come from a cassette, as the recorded client gave them."""

    def __init__(self, cassette: Cassette, role: str) -> None:
        super().__init__(cassette.model_name(role), retries=0)
        self.role = role
        self._cassette = cassette
        self._facts = cassette.clients.get(role) or {}
        self.small = self._facts.get("small") is True  # the protocol `auto` chose by it

    @property
    def where(self) -> str:
        recorded = self._facts.get("where")
        return recorded if isinstance(recorded, str) and recorded else self.model

    @property
    def measures_usage(self) -> bool:
        return self._facts.get("measures_usage") is True

    def supports_tools(self) -> bool:
        return self._facts.get("tools") is not False

    def context_window(self) -> int:
        window = self._facts.get("context_window")
        low, high = _WINDOW_RANGE
        return window if isinstance(window, int) and low <= window <= high else DEFAULT_WINDOW

    def check_credentials(self) -> None:
        return  # nothing is sent anywhere

    def priced(self) -> bool:
        return self._facts.get("priced") is True and isinstance(self._facts.get("model"), str)

    def cost_bound(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The recorded model's price, as the run bounded its calls with it."""
        if not self.priced():
            return None
        try:
            p, c = load_litellm().cost_per_token(
                model=self._facts["model"], prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
            return float(p) + float(c)
        except Exception:
            return None

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
        self._before(messages, tools, max_tokens, final)
        return self._play((messages, tools, max_tokens))

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        *,
        final: bool = False,
    ) -> Reply:
        self._before(messages, tools, max_tokens, final)
        return self._play((messages, tools, max_tokens))

    def _play(self, request: tuple[list[dict[str, Any]], list[dict[str, Any]] | None, int | None]) -> Reply:
        started = time.monotonic()
        call = self._cassette.play(self.role, request_key(*request))
        try:
            reply = self._replayed(call, started)
        except (RlmError, BudgetExceeded) as exc:
            self._record(request, error=exc)  # the re-run's own trace keeps a cassette too
            raise
        self._record(request, reply=reply)
        return reply

    def _replayed(self, call: dict[str, Any] | None, started: float) -> Reply:
        """The recorded outcome: the reply, or the error the call ended with, raised again."""
        if call is None:
            raise ProviderError(
                f"no recorded reply is left for this call of the {self.role} model "
                "(the re-run asks more than the recorded run did)"
            )
        message = str(call.get("error") or "")
        kind = call.get("error_kind")
        if kind == "budget":
            stop = BudgetExceeded(str(call.get("limit") or "time"), message)
            if call.get("stopped") is True and self.budget is not None and self.budget.stopped is None:
                self.budget.stopped = stop  # later calls meet the same stop, as in the run
            raise stop
        if kind == "config":
            raise ConfigError(message)
        if kind is not None or "error" in call:
            err = ProviderError(message or "the recorded call failed")
            if call.get("gave_up") is True:
                # The run's one failure decision about this provider, taken again.
                self._failed[self.where] = err
                self._events(ProviderFailed(model=self.model, where=self.where, message=err.message))
            raise err
        reply = call.get("reply") if isinstance(call.get("reply"), dict) else {}
        assert isinstance(reply, dict)
        calls = [c for c in reply.get("tool_calls") or [] if isinstance(c, dict)]
        finish = reply.get("finish_reason")
        return Reply(
            content=str(reply.get("content") or ""),
            tool_calls=[
                ToolCall(
                    id=str(c.get("id") or f"call_{i}"),
                    name=str(c.get("name") or ""),
                    arguments=str(c.get("arguments") or ""),
                )
                for i, c in enumerate(calls)
            ],
            prompt_tokens=_count(call.get("prompt_tokens")),
            completion_tokens=_count(call.get("completion_tokens")),
            cost=_cost(call.get("cost")),
            latency_s=time.monotonic() - started,
            model=self.model,
            finish_reason=finish if isinstance(finish, str) else None,
        )
